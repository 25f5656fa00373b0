package valkey_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSameAsRueidis: valkey-go is a fork of rueidis with its names changed,
// and this adapter is the rueidis adapter with the same names changed (the
// two modules cannot share code: each would link the other's client). A fix
// made to one and not the other fails here.
func TestSameAsRueidis(t *testing.T) {
	rename := strings.NewReplacer(
		"github.com/redis/rueidis", "github.com/valkey-io/valkey-go",
		"IsRedisNil", "IsValkeyNil",
		"IsRedisErr", "IsValkeyErr",
		"RedisMessage", "ValkeyMessage",
		"rueidis", "valkey",
	)
	for mine, theirs := range map[string]string{"valkey.go": "rueidis.go", "pubsub.go": "pubsub.go"} {
		src, err := os.ReadFile(filepath.Join("..", "rueidis", theirs))
		if os.IsNotExist(err) {
			t.Skip("the rueidis adapter is not beside this module (not in quorumlock's repository)")
		}
		require.NoError(t, err)
		got, err := os.ReadFile(mine)
		require.NoError(t, err)
		assert.Equal(t, rename.Replace(string(src)), string(got), "%s is not ../rueidis/%s renamed", mine, theirs)
	}
}
