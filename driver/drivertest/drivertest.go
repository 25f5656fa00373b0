// Package drivertest is the conformance suite of the driver seam: [Run]
// checks an adapter against the contract of package driver and the lock's
// contract through a redlock.Client built on it, on redis-server processes
// that it starts (internal/harness/redistest: a missing server fails the test when
// CI is "true", and skips it elsewhere). An adapter passes it by calling
// Run from one test. It is for tests only.
package drivertest

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/driver"
	"quorumlock.dev/fence"
	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
	"quorumlock.dev/redlock"
)

// NewConn returns a Conn of the adapter under test to the one server at
// addr, which is up when it is called; the Conn's client is closed by a
// t.Cleanup. The suite kills, pauses and resumes servers behind it.
type NewConn func(t testing.TB, addr string) driver.Conn

// RunFull is [Run] for an adapter that has every capability, push wake-up
// ([driver.Subscriber]) and inspection ([driver.Inspector]): a Conn that
// lacks one fails the suite instead of skipping its subtest, so that an
// adapter that loses one cannot pass unnoticed. This project's adapters run
// it.
func RunFull(t *testing.T, newConn NewConn) {
	t.Run("Capabilities", func(t *testing.T) {
		conn, _, _ := server(t, newConn)
		if _, ok := conn.(driver.Subscriber); !ok {
			t.Errorf("%T has no push wake-up (driver.Subscriber)", conn)
		}
		if _, ok := conn.(driver.Inspector); !ok {
			t.Errorf("%T has no Inspector (driver.Inspector)", conn)
		}
	})
	Run(t, newConn)
}

// callTimeout bounds each check's calls: far above what a loaded machine
// needs, far below the test binary's own timeout.
const callTimeout = 30 * time.Second

// Run runs every check of the suite, each a subtest on servers of its own,
// on Conns made by newConn. A capability the Conn lacks ([driver.Subscriber],
// [driver.Inspector]) skips its subtest with a message; the lock's checks
// need push wake-up.
func Run(t *testing.T, newConn NewConn) {
	t.Run("SetNX", func(t *testing.T) { testSetNX(t, newConn) })
	t.Run("Eval", func(t *testing.T) { testEval(t, newConn) })
	t.Run("NOSCRIPT", func(t *testing.T) { testNoScript(t, newConn) })
	t.Run("UnexpectedReply", func(t *testing.T) { testUnexpectedReply(t, newConn) })
	t.Run("EndedContext", func(t *testing.T) { testEndedContext(t, newConn) })
	t.Run("NodeDown", func(t *testing.T) { testNodeDown(t, newConn) })
	t.Run("Subscription", func(t *testing.T) { testSubscription(t, newConn) })
	t.Run("Inspector", func(t *testing.T) { testInspector(t, newConn) })
	t.Run("Lock", func(t *testing.T) { testLock(t, newConn) })
	t.Run("HungMaster", func(t *testing.T) { testHungMaster(t, newConn) })
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	t.Cleanup(cancel)
	return ctx
}

// server starts one server and returns a Conn of the adapter to it and a
// go-redis client that checks what the server holds.
func server(t *testing.T, newConn NewConn) (driver.Conn, *redis.Client, *redisserver.Server) {
	t.Helper()
	srv := redistest.Start(t, redisserver.Options{})
	conn := newConn(t, srv.Addr())
	require.NotNil(t, conn)
	return conn, redistest.Client(t, srv.Addr()), srv
}

func testSetNX(t *testing.T, newConn NewConn) {
	conn, raw, srv := server(t, newConn)
	ctx := testCtx(t)

	ok, err := conn.SetNX(ctx, "lock:a", "token-1", time.Hour+999*time.Microsecond)
	require.NoError(t, err)
	assert.True(t, ok, "an absent key is set")
	assert.Equal(t, "token-1", raw.Get(ctx, "lock:a").Val())
	pttl := raw.PTTL(ctx, "lock:a").Val()
	assert.LessOrEqual(t, pttl, time.Hour, "PX is the TTL in whole milliseconds")
	assert.Greater(t, pttl, time.Hour-time.Minute)

	ok, err = conn.SetNX(ctx, "lock:a", "token-2", time.Hour)
	require.NoError(t, err, "a key that exists is no error")
	assert.False(t, ok)
	assert.Equal(t, "token-1", raw.Get(ctx, "lock:a").Val(), "the holder's value stays")

	require.NoError(t, raw.HSet(ctx, "lock:hash", "f", "v").Err())
	ok, err = conn.SetNX(ctx, "lock:hash", "token", time.Hour)
	require.NoError(t, err, "SET NX on a key of another type is a nil reply")
	assert.False(t, ok)

	if d := driver.Describe(conn); d.Addr != "" {
		assert.Equal(t, srv.Addr(), d.Addr, "Describe names the server")
	}
}

func testEval(t *testing.T, newConn NewConn) {
	conn, raw, _ := server(t, newConn)
	ctx := testCtx(t)
	key := "eval:k"
	tests := []struct {
		name, src string
		args      []any
		want      any
	}{
		{"int", "return 42", nil, int64(42)},
		{"negative", "return -7", nil, int64(-7)},
		{"string", "return 'x'", nil, "x"},
		{"status", "return {ok = 'fine'}", nil, "fine"},
		{"array", "return {1, 'a', {2, 'b'}}", nil, []any{int64(1), "a", []any{int64(2), "b"}}},
		{"nil in array", "return {1, redis.call('get', KEYS[1] .. ':absent'), 3}", nil, []any{int64(1), nil, int64(3)}},
		{"empty array", "return {}", nil, []any{}},
		{"args", "return {KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4]}",
			[]any{"s", 7, int64(-8), uint64(18446744073709551615)},
			[]any{key, "s", "7", "-8", "18446744073709551615"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := conn.Eval(ctx, driver.NewScript(tt.src), []string{key}, tt.args...)
			require.NoError(t, err)
			assert.Equal(t, tt.want, v)
		})
	}
	for _, src := range []string{"return nil", "return false", "return redis.call('get', KEYS[1] .. ':absent')"} {
		t.Run("nil/"+src, func(t *testing.T) {
			v, err := conn.Eval(ctx, driver.NewScript(src), []string{key})
			require.ErrorIs(t, err, driver.Nil)
			assert.Nil(t, v)
			assert.True(t, driver.Replied(err))
		})
	}
	t.Run("WRONGTYPE", func(t *testing.T) {
		require.NoError(t, raw.HSet(ctx, "eval:hash", "f", "v").Err())
		_, err := conn.Eval(ctx, driver.NewScript("return redis.call('get', KEYS[1])"), []string{"eval:hash"})
		var re *driver.ReplyError
		require.ErrorAs(t, err, &re)
		assert.True(t, strings.HasPrefix(re.Msg, "WRONGTYPE"), "%q is not the server's message", re.Msg)
		assert.NotErrorIs(t, err, driver.Nil)
		assert.True(t, driver.Replied(err), "an error reply is a reply")
	})
	t.Run("error_reply", func(t *testing.T) {
		_, err := conn.Eval(ctx, driver.NewScript("return redis.error_reply('MYERR boom')"), nil)
		var re *driver.ReplyError
		require.ErrorAs(t, err, &re)
		assert.True(t, strings.HasPrefix(re.Msg, "MYERR boom"), "%q is not the script's error", re.Msg)
		assert.True(t, driver.Replied(err))
	})
}

func testNoScript(t *testing.T, newConn NewConn) {
	conn, raw, _ := server(t, newConn)
	ctx := testCtx(t)
	script := driver.NewScript("return ARGV[1] -- " + t.Name())

	v, err := conn.Eval(ctx, script, nil, "first")
	require.NoError(t, err, "a script the server lacks")
	assert.Equal(t, "first", v)
	assert.Equal(t, []bool{true}, raw.ScriptExists(ctx, script.Hash()).Val(), "the server has it now")

	require.NoError(t, raw.ScriptFlush(ctx).Err())
	v, err = conn.Eval(ctx, script, nil, "after flush")
	require.NoError(t, err, "NOSCRIPT after SCRIPT FLUSH falls back to EVAL")
	assert.Equal(t, "after flush", v)
}

// testUnexpectedReply: a script's double is a double in RESP3 (a string in
// RESP2): a reply of no type the seam carries is ErrUnexpectedReply.
func testUnexpectedReply(t *testing.T, newConn NewConn) {
	conn, _, _ := server(t, newConn)
	ctx := testCtx(t)
	for _, src := range []string{"return {double = 3.5}", "return {1, {double = 3.5}}"} {
		t.Run(src, func(t *testing.T) {
			v, err := conn.Eval(ctx, driver.NewScript(src), nil)
			if err == nil {
				// RESP2 sends a double as a bulk string.
				assert.Contains(t, []any{"3.5", []any{int64(1), "3.5"}}, v)
				return
			}
			assert.ErrorIs(t, err, driver.ErrUnexpectedReply)
			assert.Nil(t, v)
		})
	}
}

func testEndedContext(t *testing.T, newConn NewConn) {
	conn, raw, _ := server(t, newConn)
	check := testCtx(t)
	for name, cancelled := range map[string]func() context.Context{
		"cancelled": func() context.Context {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			return ctx
		},
		"deadline": func() context.Context {
			ctx, cancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
			t.Cleanup(cancel)
			return ctx
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := cancelled()
			ok, err := conn.SetNX(ctx, "ended:"+name, "v", time.Hour)
			require.ErrorIs(t, err, ctx.Err())
			assert.False(t, ok)
			assert.False(t, driver.Replied(err), "a context error is not a reply")

			_, err = conn.Eval(ctx, driver.NewScript("return redis.call('set', KEYS[1], 'v')"), []string{"ended:eval:" + name})
			require.ErrorIs(t, err, ctx.Err())
			assert.Zero(t, raw.Exists(check, "ended:"+name, "ended:eval:"+name).Val(), "nothing was sent")

			if in, ok := conn.(driver.Inspector); ok {
				_, err = in.Info(ctx, "server")
				assert.ErrorIs(t, err, ctx.Err())
				_, err = in.Time(ctx)
				assert.ErrorIs(t, err, ctx.Err())
				_, err = in.ConfigGet(ctx, "appendonly")
				assert.ErrorIs(t, err, ctx.Err())
			}
		})
	}
}

// testNodeDown: a server killed after the Conn was made. Its calls fail
// without a reply, whatever the client tried in the meantime.
func testNodeDown(t *testing.T, newConn NewConn) {
	conn, _, srv := server(t, newConn)
	ctx := testCtx(t)
	_, err := conn.SetNX(ctx, "down:warm", "v", time.Hour)
	require.NoError(t, err, "the connection is made first")
	require.NoError(t, srv.Kill())

	// A short deadline of each call: a client that redials until its
	// context ends still fails in time.
	call := func(name string, f func(ctx context.Context) error) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		err := f(ctx)
		require.Error(t, err, name)
		assert.False(t, driver.Replied(err), "%s: %v is not a reply", name, err)
	}
	call("SetNX", func(ctx context.Context) error { _, err := conn.SetNX(ctx, "down:k", "v", time.Hour); return err })
	call("Eval", func(ctx context.Context) error {
		_, err := conn.Eval(ctx, driver.NewScript("return 1"), nil)
		return err
	})
	if in, ok := conn.(driver.Inspector); ok {
		call("Info", func(ctx context.Context) error { _, err := in.Info(ctx, "server"); return err })
	}
}

func receive(t *testing.T, ctx context.Context, sub driver.Subscription) driver.Push {
	t.Helper()
	p, err := sub.Receive(ctx)
	require.NoError(t, err)
	return p
}

func testSubscription(t *testing.T, newConn NewConn) {
	conn, raw, _ := server(t, newConn)
	s, ok := conn.(driver.Subscriber)
	if !ok {
		t.Skipf("%T has no push wake-up (its package says so)", conn)
	}
	ctx := testCtx(t)
	sub := s.Subscribe(ctx)
	t.Cleanup(func() { _ = sub.Close() })

	require.NoError(t, sub.Subscribe(ctx, "wake:a"))
	require.NoError(t, sub.Ping(ctx, "subscribed"))
	assert.Equal(t, driver.Push{Pong: true, Payload: "subscribed"}, receive(t, ctx, sub),
		"the pong, not the subscription's confirmation")

	require.Equal(t, int64(1), raw.Publish(ctx, "wake:a", "m1").Val())
	require.NoError(t, sub.Ping(ctx, "after-m1"))
	assert.Equal(t, driver.Push{Channel: "wake:a", Payload: "m1"}, receive(t, ctx, sub), "the message first")
	assert.Equal(t, driver.Push{Pong: true, Payload: "after-m1"}, receive(t, ctx, sub))

	require.NoError(t, sub.Unsubscribe(ctx, "wake:a"))
	require.NoError(t, sub.Ping(ctx, "unsubscribed"))
	assert.Equal(t, driver.Push{Pong: true, Payload: "unsubscribed"}, receive(t, ctx, sub))
	assert.Zero(t, raw.Publish(ctx, "wake:a", "unheard").Val(), "no subscriber is left")

	require.NoError(t, sub.Subscribe(ctx, "wake:b"))
	require.NoError(t, sub.Ping(ctx, "b"))
	assert.Equal(t, driver.Push{Pong: true, Payload: "b"}, receive(t, ctx, sub))
	require.Equal(t, int64(1), raw.Publish(ctx, "wake:b", "heard").Val())
	assert.Equal(t, driver.Push{Channel: "wake:b", Payload: "heard"}, receive(t, ctx, sub))

	done := make(chan error, 1)
	go func() {
		_, err := sub.Receive(t.Context()) // no deadline: only Close ends it
		done <- err
	}()
	require.NoError(t, sub.Close())
	select {
	case err := <-done:
		require.Error(t, err)
		assert.False(t, driver.Replied(err), "%v is not a reply", err)
	case <-time.After(callTimeout):
		t.Fatal("Close did not end the Receive that waits")
	}
}

func testInspector(t *testing.T, newConn NewConn) {
	conn, _, _ := server(t, newConn)
	in, ok := conn.(driver.Inspector)
	if !ok {
		t.Skipf("%T has no Inspector (its package says so)", conn)
	}
	ctx := testCtx(t)
	info, err := in.Info(ctx, "server")
	require.NoError(t, err)
	assert.Contains(t, info, "run_id:")
	assert.NotContains(t, info, "used_memory:", "only the server section")
	info, err = in.Info(ctx, "")
	require.NoError(t, err)
	assert.Contains(t, info, "used_memory:", "the default sections")

	now, err := in.Time(ctx)
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now(), now, time.Minute)
	assert.NotZero(t, now.Nanosecond()%int(time.Second), "microseconds are read")

	cfg, err := in.ConfigGet(ctx, "appendonly")
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"appendonly": "no"}, cfg)
	cfg, err = in.ConfigGet(ctx, "maxmemory-polic*")
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"maxmemory-policy": "noeviction"}, cfg)
}

// debugLog logs the client's debug messages to t's output, shown when
// the test fails or runs with -v: a wait that missed its wake-up says why.
func debugLog(t *testing.T) redlock.Option {
	return redlock.WithLogger(slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})))
}

// masters starts n servers and returns the adapter's Conns to them and
// go-redis clients that read what they hold.
func masters(t *testing.T, newConn NewConn, n int) ([]driver.Conn, []*redis.Client, []*redisserver.Server) {
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

func testLock(t *testing.T, newConn NewConn) {
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
		holder, err := c.TryLock(ctx, "dt:fair", time.Hour)
		require.NoError(t, err)
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
func testHungMaster(t *testing.T, newConn NewConn) {
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
