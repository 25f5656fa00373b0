package redistest_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/internal/redisserver"
	"quorumlock.dev/internal/redistest"
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

// recorder records how a helper ended the test instead of ending the real one.
type recorder struct {
	testing.TB
	failed, skipped bool
	msg             string
}

func (r *recorder) Fatal(args ...any) { r.failed, r.msg = true, fmt.Sprint(args...); runtime.Goexit() }
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recorder) Skipf(format string, args ...any) {
	r.skipped, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestMissingServer(t *testing.T) {
	starts := map[string]func(testing.TB){
		"Start":  func(t testing.TB) { redistest.Start(t, redisserver.Options{}) },
		"StartN": func(t testing.TB) { redistest.StartN(t, 2, redisserver.Options{}) },
	}
	for name, start := range starts {
		for _, ci := range []string{"true", ""} {
			t.Run(fmt.Sprintf("%s/CI=%s", name, ci), func(t *testing.T) {
				t.Setenv("PATH", t.TempDir())
				t.Setenv("CI", ci)
				r := &recorder{TB: t}
				done := make(chan struct{})
				go func() {
					defer close(done)
					start(r)
				}()
				<-done
				assert.Equal(t, ci == "true", r.failed, "fails in CI")
				assert.Equal(t, ci != "true", r.skipped, "skips outside CI")
				assert.Contains(t, r.msg, "apt-get install redis-server")
			})
		}
	}
}
