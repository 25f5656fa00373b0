// Package redistest gives tests real redis-server processes, started through
// [quorumlock.dev/internal/harness/redisserver] and stopped when the test ends, and go-redis clients
// configured so that faults surface instead of being retried away. A missing redis-server fails
// the test when CI is "true" and skips it elsewhere. It does not provide fakes: unit tests that
// need no real server use miniredis.
package redistest

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"quorumlock.dev/internal/harness/childproc/childproctest"
	"quorumlock.dev/internal/harness/redisserver"
)

// Start starts one server for the test and stops it when the test ends. If redis-server is
// not installed, it fails the test when the environment variable CI is "true", since in CI a
// missing server means the suite silently tested nothing, and skips it otherwise.
func Start(t testing.TB, opt redisserver.Options) *redisserver.Server {
	t.Helper()
	return StartN(t, 1, opt)[0]
}

// StartN starts n servers in parallel, by the same rules as [Start]. When n > 1 and opt.Dir is
// set, each server gets its own subdirectory of it, named by its index, so that their logs and
// data files do not collide.
func StartN(t testing.TB, n int, opt redisserver.Options) []*redisserver.Server {
	t.Helper()
	servers := make([]*redisserver.Server, n)
	g, ctx := errgroup.WithContext(t.Context())
	for i := range servers {
		o := opt
		if n > 1 && o.Dir != "" {
			o.Dir = filepath.Join(o.Dir, strconv.Itoa(i))
		}
		g.Go(func() error {
			s, err := redisserver.Start(ctx, o)
			servers[i] = s
			return err
		})
	}
	err := g.Wait()
	// Cleanups are registered here, on the test's goroutine, and also for the servers that
	// started before another failed.
	for _, s := range servers {
		if s != nil {
			t.Cleanup(func() {
				if err := s.Stop(); err != nil {
					t.Errorf("redistest: stop %s: %v", s.Addr(), err)
				}
			})
		}
	}
	if errors.Is(err, redisserver.ErrNotInstalled) {
		missing(t, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return servers
}

// Need fails or skips the test, by the rules of [Start], when redis-server is not installed:
// for tests that start servers through other code, such as the benchmark CLI.
func Need(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		missing(t, redisserver.ErrNotInstalled)
	}
}

func missing(t testing.TB, err error) {
	t.Helper()
	childproctest.Missing(t, err, "apt-get install redis-server")
}

// Client returns a client for addr that is closed when the test ends. It never retries, so
// that a test sees each fault it injects, and its timeouts are short enough for a hung server
// to fail a command within the test's time.
func Client(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(Options(addr))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Options are the options of Client, for a test that changes one.
func Options(addr string) *redis.Options {
	return &redis.Options{
		Addr:         addr,
		MaxRetries:   -1,
		DialTimeout:  time.Second,
		ReadTimeout:  3 * time.Second,
		WriteTimeout: 3 * time.Second,
		PoolSize:     16,
	}
}
