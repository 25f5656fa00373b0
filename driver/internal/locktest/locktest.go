// Package locktest holds the end-to-end checks of the lock and the fence
// over one adapter: a redlock.Client on three masters and a fence counter,
// each reached through Conns of the adapter under test, on redis-server
// processes that it starts. The public conformance kit, drivertest, checks
// the seam alone; this project's adapters run both from their tests. It is
// for this repository's tests only.
package locktest

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/driver"
	"quorumlock.dev/driver/drivertest"
	"quorumlock.dev/fence"
	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
	"quorumlock.dev/redlock"
)

// callTimeout bounds each check's calls: far above what a loaded machine
// needs, far below the test binary's own timeout.
const callTimeout = 30 * time.Second

// Run runs the lock's checks over Conns made by newConn, which must have
// push wake-up ([driver.Subscriber]): TryLock and Unlock, Extend, a wait
// woken by a push, fairness, LockAll, a fenced lock, and one master that
// accepts connections and never answers.
func Run(t *testing.T, newConn drivertest.NewConn) {
	t.Run("Lock", func(t *testing.T) { testLock(t, newConn) })
	t.Run("HungMaster", func(t *testing.T) { testHungMaster(t, newConn) })
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	t.Cleanup(cancel)
	return ctx
}

// debugLog logs the client's debug messages to t's output, shown when
// the test fails or runs with -v: a wait that missed its wake-up says why.
func debugLog(t *testing.T) redlock.Option {
	return redlock.WithLogger(slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})))
}

// masters starts n servers and returns the adapter's Conns to them and
// go-redis clients that read what they hold.
func masters(t *testing.T, newConn drivertest.NewConn, n int) ([]driver.Conn, []*redis.Client, []*redisserver.Server) {
	t.Helper()
	servers := redistest.StartN(t, n, redisserver.Options{})
	conns := make([]driver.Conn, n)
	raws := make([]*redis.Client, n)
	for i, s := range servers {
		conns[i] = newConn(t, s.Addr())
		raws[i] = redistest.Client(t, s.Addr())
	}
	return conns, raws, servers
}

// holders counts the masters whose key holds token.
func holders(t *testing.T, raws []*redis.Client, key, token string) int {
	t.Helper()
	n := 0
	for _, r := range raws {
		if r.Get(t.Context(), key).Val() == token {
			n++
		}
	}
	return n
}

// released waits until no master holds key with token: Unlock returns
// at a majority and releases the others in the background.
func released(t *testing.T, raws []*redis.Client, key, token string) {
	t.Helper()
	assert.Eventually(t, func() bool { return holders(t, raws, key, token) == 0 },
		callTimeout, 10*time.Millisecond, "%s is released everywhere", key)
}

// queued waits until queue has n entries on a majority of the masters.
func queued(t *testing.T, raws []*redis.Client, queue string, n int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		on := 0
		for _, r := range raws {
			if r.ZCard(t.Context(), queue).Val() >= n {
				on++
			}
		}
		return on > len(raws)/2
	}, callTimeout, 5*time.Millisecond, "%d waiters queued in %s", n, queue)
}

// heldEverywhere reports whether every master holds key with token.
func heldEverywhere(t *testing.T, raws []*redis.Client, key, token string) bool {
	t.Helper()
	// TryLock returns at a majority: the last masters' SETs may still be on
	// their way (a batched driver on a loaded CI machine sent all five
	// tries' checks before them). They get a second to land.
	deadline := time.Now().Add(time.Second)
	for {
		held := 0
		for _, r := range raws {
			if r.Get(t.Context(), key).Val() == token {
				held++
			}
		}
		if held == len(raws) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// subscribed waits until channel has a subscriber on a majority of the
// masters.
func subscribed(t *testing.T, raws []*redis.Client, channel string) {
	t.Helper()
	require.Eventually(t, func() bool {
		on := 0
		for _, r := range raws {
			if r.PubSubNumSub(t.Context(), channel).Val()[channel] > 0 {
				on++
			}
		}
		return on > len(raws)/2
	}, callTimeout, 5*time.Millisecond, "a waiter subscribed to %s", channel)
}

// waiting counts the Lock calls of a client that wait, through its hook.
type waiting struct {
	n       atomic.Int64
	changed chan struct{}
}

func newWaiting() *waiting { return &waiting{changed: make(chan struct{}, 64)} }

func (w *waiting) hook(delta int) {
	w.n.Add(int64(delta))
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// await waits until n Lock calls wait.
func (w *waiting) await(t *testing.T, n int64) {
	t.Helper()
	deadline := time.After(callTimeout)
	for w.n.Load() != n {
		select {
		case <-w.changed:
		case <-deadline:
			t.Fatalf("%d Lock calls wait, want %d", w.n.Load(), n)
		}
	}
}

func testLock(t *testing.T, newConn drivertest.NewConn) {
	conns, raws, _ := masters(t, newConn, 4)
	lockConns, counterConn := conns[:3], conns[3]
	lockRaws := raws[:3]
	// Room for a loaded machine under the race detector.
	const nodeTimeout = time.Second

	newClient := func(t *testing.T, opts ...redlock.Option) *redlock.Client {
		t.Helper()
		c, err := redlock.New(lockConns, append([]redlock.Option{redlock.WithNodeTimeout(nodeTimeout)}, opts...)...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}

	t.Run("TryLock/Unlock", func(t *testing.T) {
		c := newClient(t)
		ctx := testCtx(t)
		l, err := c.TryLock(ctx, "dt:try", 30*time.Second)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, holders(t, lockRaws, "lock:dt:try", l.Token()), 2, "held on a majority")
		_, err = c.TryLock(ctx, "dt:try", 30*time.Second)
		assert.ErrorIs(t, err, redlock.ErrNotAcquired)
		require.NoError(t, l.Unlock(ctx))
		assert.LessOrEqual(t, holders(t, lockRaws, "lock:dt:try", l.Token()), 1, "released on a majority")
		released(t, lockRaws, "lock:dt:try", l.Token())
		assert.ErrorIs(t, l.Unlock(ctx), redlock.ErrLockNotHeld)
	})

	t.Run("Extend", func(t *testing.T) {
		c := newClient(t)
		ctx := testCtx(t)
		l, err := c.TryLock(ctx, "dt:extend", 10*time.Second)
		require.NoError(t, err)
		until := l.Until()
		require.NoError(t, l.Extend(ctx, time.Hour))
		assert.True(t, l.Until().After(until.Add(30*time.Minute)), "the lease moved")
		extended := 0
		for _, r := range lockRaws {
			if r.PTTL(ctx, "lock:dt:extend").Val() > 50*time.Minute {
				extended++
			}
		}
		assert.GreaterOrEqual(t, extended, 2, "extended on a majority")
		require.NoError(t, l.Unlock(ctx))
	})

	t.Run("PushWakeUp", func(t *testing.T) {
		w := newWaiting()
		// The holder's TTL and the waiter's polling interval are far beyond
		// the waiter's context: only the release, pushed to the waiter,
		// lets it take the lock.
		c := newClient(t, redlock.WithHooks(redlock.Hooks{Waiting: w.hook}), redlock.WithRetry(0, time.Hour, 0), debugLog(t))
		ctx := testCtx(t)
		holder, err := c.TryLock(ctx, "dt:push", time.Hour)
		require.NoError(t, err)
		got := make(chan error, 1)
		go func() {
			l, err := c.Lock(ctx, "dt:push", 30*time.Second)
			if err == nil {
				err = l.Unlock(ctx)
			}
			got <- err
		}()
		w.await(t, 1)
		// The release script publishes on a channel named like the key.
		subscribed(t, lockRaws, "lock:dt:push")
		require.NoError(t, holder.Unlock(ctx))
		require.NoError(t, <-got)
	})

	t.Run("Fairness", func(t *testing.T) {
		w := newWaiting()
		c := newClient(t, redlock.WithFairness(5*nodeTimeout), redlock.WithHooks(redlock.Hooks{Waiting: w.hook}), debugLog(t))
		ctx := testCtx(t)
		// The order is the queue's only where the holder's key is on every
		// master: a master where its SET timed out (a loaded CI machine) is
		// free, and a waiter's attempt there can take the lock out of turn.
		var holder *redlock.Lock
		for range 5 {
			l, err := c.TryLock(ctx, "dt:fair", time.Hour)
			require.NoError(t, err)
			if heldEverywhere(t, lockRaws, "lock:dt:fair", l.Token()) {
				holder = l
				break
			}
			require.NoError(t, l.Unlock(ctx))
		}
		require.NotNil(t, holder, "the holder's key on every master in 5 tries")
		var (
			mu    sync.Mutex
			order []string
			wg    sync.WaitGroup
		)
		for i, name := range []string{"first", "second"} {
			wg.Go(func() {
				l, err := c.Lock(ctx, "dt:fair", 30*time.Second)
				if !assert.NoError(t, err, name) {
					return
				}
				mu.Lock()
				order = append(order, name)
				mu.Unlock()
				assert.NoError(t, l.Unlock(ctx))
			})
			w.await(t, int64(i+1))
			// The second takes its arrival stamp after the first is queued
			// on the masters (queue.lua in redlock/internal/fair/scripts names the queue).
			queued(t, lockRaws, "lockqu:{lock:dt:fair}", int64(i+1))
		}
		require.NoError(t, holder.Unlock(ctx))
		wg.Wait()
		assert.Equal(t, []string{"first", "second"}, order, "in the order they started waiting")
	})

	t.Run("LockAll", func(t *testing.T) {
		c := newClient(t)
		ctx := testCtx(t)
		resources := []string{"dt:all:{batch}:1", "dt:all:{batch}:2"}
		l, err := c.LockAll(ctx, resources, 30*time.Second)
		require.NoError(t, err)
		for _, r := range resources {
			assert.GreaterOrEqual(t, holders(t, lockRaws, "lock:"+r, l.Token()), 2, r)
		}
		_, err = c.TryLock(ctx, resources[1], 30*time.Second)
		assert.ErrorIs(t, err, redlock.ErrNotAcquired, "each resource is held")
		require.NoError(t, l.Unlock(ctx))
		for _, r := range resources {
			released(t, lockRaws, "lock:"+r, l.Token())
		}
	})

	t.Run("Fence", func(t *testing.T) {
		counter, err := fence.NewRedisCounter(counterConn, fence.WithTimeout(nodeTimeout))
		require.NoError(t, err)
		c := newClient(t, redlock.WithFence(counter))
		ctx := testCtx(t)
		var last uint64
		for range 3 {
			l, err := c.TryLock(ctx, "dt:fenced", 30*time.Second)
			require.NoError(t, err)
			f, ok := l.Fence()
			require.True(t, ok, "a fenced client's lock carries a fence")
			assert.Greater(t, f, last, "fences increase")
			last = f
			require.NoError(t, l.Unlock(ctx))
		}
		v, err := raws[3].Get(ctx, fence.Key("dt:fenced")).Uint64()
		require.NoError(t, err)
		assert.Equal(t, last, v, "minted on the counter node")
	})
}

// testHungMaster: one of three masters accepts and never answers (its
// server stopped with SIGSTOP after the Conns connected). Locks go on with
// the other two, each call bounded by the node timeout, and what the hung
// master holds stays bounded.
func testHungMaster(t *testing.T, newConn drivertest.NewConn) {
	conns, _, servers := masters(t, newConn, 3)
	ctx := testCtx(t)
	for _, c := range conns {
		_, err := c.SetNX(ctx, "hung:warm", "v", time.Minute)
		require.NoError(t, err, "connected before the hang")
	}
	require.NoError(t, servers[0].Pause())
	t.Cleanup(func() { _ = servers[0].Resume() })

	const nodeTimeout = 200 * time.Millisecond
	c, err := redlock.New(conns, redlock.WithNodeTimeout(nodeTimeout))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })

	baseline := runtime.NumGoroutine()
	// Generous: a TryLock needs a majority's answers, never the hung one's.
	const bound = nodeTimeout + 10*time.Second
	for i := range 30 {
		start := time.Now()
		l, err := c.TryLock(ctx, "hung:"+strconv.Itoa(i), 30*time.Second)
		took := time.Since(start)
		require.NoError(t, err, "attempt %d", i)
		assert.Less(t, took, bound, "attempt %d stalled behind the hung master", i)
		start = time.Now()
		err = l.Unlock(ctx)
		assert.True(t, err == nil || errors.Is(err, redlock.ErrLockNotHeld), "attempt %d: %v", i, err)
		assert.Less(t, time.Since(start), bound, "unlock %d stalled behind the hung master", i)
	}
	// The calls given up on the hung master end or stay capped: not one
	// goroutine per attempt.
	deadline := time.Now().Add(callTimeout)
	for runtime.NumGoroutine() > baseline+50 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	assert.LessOrEqual(t, runtime.NumGoroutine(), baseline+50, "goroutines left behind the hung master")
}
