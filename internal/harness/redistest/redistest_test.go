package redistest_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/internal/harness/childproc/childproctest"
	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
)

func TestStartAndClient(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redisserver.Options{})
	c := redistest.Client(t, s.Addr())
	require.NoError(t, c.Ping(t.Context()).Err())
	opt := c.Options()
	assert.Equal(t, 16, opt.PoolSize)
	assert.Equal(t, time.Second, opt.DialTimeout)
	assert.Equal(t, 3*time.Second, opt.ReadTimeout)
	assert.Equal(t, 3*time.Second, opt.WriteTimeout)
}

func TestStartN(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	servers := redistest.StartN(t, 3, redisserver.Options{Dir: dir})
	require.Len(t, servers, 3)
	seen := map[string]bool{}
	for i, s := range servers {
		assert.False(t, seen[s.Addr()], "address %s used twice", s.Addr())
		seen[s.Addr()] = true
		assert.Equal(t, fmt.Sprintf("%s/%d", dir, i), s.Dir(), "servers sharing Options.Dir get their own subdirectory")
		require.NoError(t, redistest.Client(t, s.Addr()).Ping(t.Context()).Err())
	}
}

func TestMissingServer(t *testing.T) {
	childproctest.CheckMissing(t, "apt-get install redis-server", map[string]func(testing.TB){
		"Start":  func(t testing.TB) { redistest.Start(t, redisserver.Options{}) },
		"StartN": func(t testing.TB) { redistest.StartN(t, 2, redisserver.Options{}) },
	})
}
