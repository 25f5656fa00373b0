package childproctest_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"

	"quorumlock.dev/internal/childproc/childproctest"
)

func TestMissing(t *testing.T) {
	for _, ci := range []string{"true", "false", ""} {
		t.Run("CI="+ci, func(t *testing.T) {
			t.Setenv("CI", ci)
			end := childproctest.Catch(t, func(t testing.TB) {
				childproctest.Missing(t, errors.New("server not found"), "apt-get install server")
			})
			assert.Equal(t, ci == "true", end.Failed, "fails in CI")
			assert.Equal(t, ci != "true", end.Skipped, "skips outside CI")
			assert.Contains(t, end.Msg, "server not found")
			assert.Contains(t, end.Msg, "apt-get install server")
		})
	}
}

func TestCatchNormalReturn(t *testing.T) {
	end := childproctest.Catch(t, func(testing.TB) {})
	assert.Equal(t, childproctest.Ending{}, end)
}
