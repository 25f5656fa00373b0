package childproctest

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestMissing(t *testing.T) {
	for _, ci := range []string{"true", "false", ""} {
		t.Run("CI="+ci, func(t *testing.T) {
			t.Setenv("CI", ci)
			end := catch(t, func(t testing.TB) {
				Missing(t, errors.New("server not found"), "apt-get install server")
			})
			assert.Equal(t, ci == "true", end.failed, "fails in CI")
			assert.Equal(t, ci != "true", end.skipped, "skips outside CI")
			assert.Contains(t, end.msg, "server not found")
			assert.Contains(t, end.msg, "apt-get install server")
		})
	}
}

func TestCheckMissing(t *testing.T) {
	CheckMissing(t, "apt-get install server", map[string]func(testing.TB){
		"Missing": func(t testing.TB) { Missing(t, errors.New("server not found"), "apt-get install server") },
	})
}

func TestCatchNormalReturn(t *testing.T) {
	assert.Equal(t, ending{}, catch(t, func(testing.TB) {}))
}
