package redlock

// Crowds on real redis-server processes: a burst of callers on one free
// resource, from one Client or from eight new Clients whose go-redis pools
// are cold (eight pods started together), with one core kept busy. Each run
// must end with exactly one holder, and soon after the burst no master may
// hold a key but the holder's.

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/driver/goredis"
	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
)

// busyCore keeps one core busy until the test ends, as another process on
// the machine would: the crowd's failures were seen on a loaded box.
func busyCore(t *testing.T) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for n := 0; ; n++ {
			if n%1024 == 0 {
				select {
				case <-stop:
					return
				default:
				}
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
}

// crowdClients are n Clients over servers, each with go-redis clients of
// its own at the library's defaults, as n pods would make them: their pools
// are cold until their first calls.
func crowdClients(t *testing.T, servers []*redisserver.Server, n int, opts ...Option) []*Client {
	t.Helper()
	out := make([]*Client, n)
	for k := range out {
		rdbs := make([]*redis.Client, len(servers))
		for i, s := range servers {
			rdbs[i] = redis.NewClient(&redis.Options{Addr: s.Addr()})
			t.Cleanup(func() { _ = rdbs[i].Close() })
		}
		c, err := New(goredis.Masters(rdbs...), opts...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		out[k] = c
	}
	return out
}

// burst runs calls callers spread round-robin over clients, all started
// within a few ms, each calling try on its client; it returns the locks
// won and the errors of the rest.
func burst(clients []*Client, calls int, try func(*Client) (*Lock, error)) ([]*Lock, []error) {
	var (
		mu    sync.Mutex
		won   []*Lock
		errs  []error
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for k := range calls {
		c := clients[k%len(clients)]
		wg.Go(func() {
			<-start
			l, err := try(c)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			won = append(won, l)
		})
	}
	close(start)
	wg.Wait()
	return won, errs
}

// keysOf reads the lock key of resource on every server through fresh
// clients: the token on each ("" where none).
func keysOf(t *testing.T, servers []*redisserver.Server, resource string) []string {
	t.Helper()
	out := make([]string, len(servers))
	for i, s := range servers {
		out[i] = lockValue(t, s.Addr(), resource)
	}
	return out
}

// errorKinds counts errs by the sentinel each wraps, for the test's log.
func errorKinds(errs []error) map[string]int {
	kinds := map[string]int{}
	for _, err := range errs {
		switch {
		case errors.Is(err, ErrQuorumUnavailable):
			kinds["quorum unavailable"]++
		case errors.Is(err, ErrNotAcquired):
			kinds["not acquired"]++
		case errors.Is(err, context.DeadlineExceeded):
			kinds["deadline"]++
		default:
			kinds[err.Error()]++
		}
		if errors.Is(err, ErrQuorumUnavailable) && kinds["quorum unavailable"] == 1 {
			kinds["first: "+err.Error()]++
		}
	}
	return kinds
}

func TestCrowdEndsWithOneHolder(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped with -short: a load test on real servers")
	}
	servers := redistest.StartN(t, 5, redisserver.Options{})
	busyCore(t)
	// The calls of a burst are not about the node timeout: the library's
	// default outside the race detector, which makes this code 5-10x slower.
	timeout := 50 * time.Millisecond
	if raceEnabled() {
		timeout = 250 * time.Millisecond
	}
	const calls = 100
	ttl := time.Minute
	for _, tc := range []struct {
		name    string
		clients int
		fair    bool
		wait    bool
	}{
		{"TryLock/one client", 1, false, false},
		{"TryLock/8 cold clients", 8, false, false},
		{"Lock/one client", 1, false, true},
		{"Lock/8 cold clients", 8, false, true},
		{"Lock fair/one client", 1, true, true},
		{"Lock fair/8 cold clients", 8, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []Option{WithNodeTimeout(timeout)}
			if tc.fair {
				opts = append(opts, WithFairness(time.Second))
			}
			clients := crowdClients(t, servers, tc.clients, opts...)
			resource := resourceName(t)
			// Waiting callers wait up to 10 s for a holder; once one
			// holds, the rest wait half a second more (a second holder
			// would show then: the first holds for the TTL) and stop.
			waitCtx, stop := context.WithTimeout(context.Background(), 10*time.Second)
			defer stop()
			var once sync.Once
			won, errs := burst(clients, calls, func(c *Client) (*Lock, error) {
				if !tc.wait {
					return c.TryLock(context.Background(), resource, ttl)
				}
				l, err := c.Lock(waitCtx, resource, ttl)
				if err == nil {
					once.Do(func() { time.AfterFunc(500*time.Millisecond, stop) })
				}
				return l, err
			})
			t.Logf("%d won; the others: %v", len(won), errorKinds(errs))
			require.Len(t, won, 1, "a burst on a free resource must end with exactly one holder")
			holder := won[0]
			if !tc.wait {
				for _, err := range errs {
					assert.ErrorIs(t, err, ErrNotAcquired, "a TryLock that lost to the holder")
				}
			}
			// Every lost attempt's keys are released, in the background
			// where a release did not reach a master in time.
			var keys []string
			gone := assert.Eventually(t, func() bool {
				keys = keysOf(t, servers, resource)
				for _, k := range keys {
					if k != "" && k != holder.Token() {
						return false
					}
				}
				return true
			}, 40*timeout, timeout/5, "keys of lost attempts left on the masters")
			if !gone {
				t.Logf("holder %s, keys %q", holder.Token(), keys)
			}
			held := 0
			for _, k := range keys {
				if k == holder.Token() {
					held++
				}
			}
			assert.GreaterOrEqual(t, held, len(servers)/2+1, "the holder's key on a majority")
			assert.NoError(t, holder.Unlock(context.Background()))
		})
	}
}
