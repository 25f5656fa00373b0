// Package drivertest is the conformance suite of the driver seam: [Run]
// checks an adapter against the contract of package driver alone, through
// its Conn, on redis-server processes that it starts
// (internal/harness/redistest: a missing server fails the test when CI is
// "true", and skips it elsewhere). It imports neither the lock nor the
// fence, so an adapter of another module runs it with nothing but the seam.
// An adapter passes it by calling Run from one test. It is for tests only.
package drivertest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/driver"
	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
)

// NewConn returns a Conn of the adapter under test to the one server at
// addr, which is up when it is called; the Conn's client is closed by a
// t.Cleanup. The suite kills, pauses and resumes servers behind it.
type NewConn func(t testing.TB, addr string) driver.Conn

// RunFull is [Run] for an adapter that has every capability, push wake-up
// ([driver.Subscriber]), inspection ([driver.Inspector]) and a description
// ([driver.Describer]): a Conn that lacks one fails the
// suite instead of skipping its subtest, so that an adapter that loses one
// cannot pass unnoticed. This project's adapters run it.
func RunFull(t *testing.T, newConn NewConn) {
	t.Run("Capabilities", func(t *testing.T) {
		conn, _, _ := server(t, newConn)
		if err := Capabilities(conn); err != nil {
			t.Error(err)
		}
	})
	Run(t, newConn)
}

// Capabilities returns an error naming each optional capability of the
// seam that conn lacks: [driver.Subscriber], [driver.Inspector],
// [driver.Describer]; nil when it has them all.
func Capabilities(conn driver.Conn) error {
	var missing []string
	if _, ok := conn.(driver.Subscriber); !ok {
		missing = append(missing, "push wake-up (driver.Subscriber)")
	}
	if _, ok := conn.(driver.Inspector); !ok {
		missing = append(missing, "INFO, TIME and CONFIG GET (driver.Inspector)")
	}
	if _, ok := conn.(driver.Describer); !ok {
		missing = append(missing, "a description (driver.Describer)")
	}
	if missing == nil {
		return nil
	}
	return fmt.Errorf("drivertest: %T has no %s", conn, strings.Join(missing, ", no "))
}

// callTimeout bounds each check's calls: far above what a loaded machine
// needs, far below the test binary's own timeout.
const callTimeout = 30 * time.Second

// Run runs every check of the suite, each a subtest on a server of its
// own, on Conns made by newConn. A capability the Conn lacks
// ([driver.Subscriber], [driver.Inspector]) skips its subtest with a
// message.
func Run(t *testing.T, newConn NewConn) {
	t.Run("SetNX", func(t *testing.T) { testSetNX(t, newConn) })
	t.Run("Eval", func(t *testing.T) { testEval(t, newConn) })
	t.Run("NOSCRIPT", func(t *testing.T) { testNoScript(t, newConn) })
	t.Run("UnexpectedReply", func(t *testing.T) { testUnexpectedReply(t, newConn) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, newConn) })
	t.Run("EndedContext", func(t *testing.T) { testEndedContext(t, newConn) })
	t.Run("NodeDown", func(t *testing.T) { testNodeDown(t, newConn) })
	t.Run("HungServer", func(t *testing.T) { testHungServer(t, newConn) })
	t.Run("Subscription", func(t *testing.T) { testSubscription(t, newConn) })
	t.Run("Inspector", func(t *testing.T) { testInspector(t, newConn) })
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

// testConcurrent: the Conn's methods are safe for concurrent use, and
// each call gets its own reply, however the client shares connections
// (pooled, pipelined, batched).
func testConcurrent(t *testing.T, newConn NewConn) {
	conn, raw, _ := server(t, newConn)
	ctx := testCtx(t)
	const n = 64
	echo := driver.NewScript("return {ARGV[1], redis.call('incr', KEYS[1])}")
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		won     []int
		counts  = map[int64]bool{}
		failure error
	)
	for i := range n {
		wg.Go(func() {
			ok, err := conn.SetNX(ctx, "concurrent:lock", fmt.Sprint("token-", i), time.Hour)
			v, everr := conn.Eval(ctx, echo, []string{"concurrent:count"}, i)
			mu.Lock()
			defer mu.Unlock()
			if err = errors.Join(err, everr); err != nil {
				failure = errors.Join(failure, err)
				return
			}
			if ok {
				won = append(won, i)
			}
			reply, _ := v.([]any)
			if len(reply) != 2 || reply[0] != fmt.Sprint(i) {
				failure = errors.Join(failure, fmt.Errorf("call %d got the reply %v", i, v))
				return
			}
			c, _ := reply[1].(int64)
			counts[c] = true
		})
	}
	wg.Wait()
	require.NoError(t, failure)
	require.Len(t, won, 1, "exactly one SET NX of a key wins")
	assert.Equal(t, fmt.Sprint("token-", won[0]), raw.Get(ctx, "concurrent:lock").Val(), "the winner's value is set")
	assert.Len(t, counts, n, "each script saw its own increment")
}

// testHungServer: a server that accepts and never answers (stopped with
// SIGSTOP after the Conn connected). Each call fails without a reply by
// its context's deadline or cancellation, or the client's own timeout
// (the seam bounds only what is sent after ctx ended; the lock bounds the
// rest with its own timers); the Conn answers again once the server does.
func testHungServer(t *testing.T, newConn NewConn) {
	conn, _, srv := server(t, newConn)
	ctx := testCtx(t)
	_, err := conn.SetNX(ctx, "hung:warm", "v", time.Minute)
	require.NoError(t, err, "connected before the hang")
	require.NoError(t, srv.Pause())
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			_ = srv.Resume()
		}
	})

	calls := map[string]func(ctx context.Context) error{
		"SetNX": func(ctx context.Context) error { _, err := conn.SetNX(ctx, "hung:k", "v", time.Minute); return err },
		"Eval": func(ctx context.Context) error {
			_, err := conn.Eval(ctx, driver.NewScript("return 1"), nil)
			return err
		},
	}
	if in, ok := conn.(driver.Inspector); ok {
		calls["Info"] = func(ctx context.Context) error { _, err := in.Info(ctx, "server"); return err }
	}
	// Far above a client's usual read timeout (go-redis: 3 s), far below
	// the test's.
	const bound = 15 * time.Second
	baseline := runtime.NumGoroutine()
	var wg sync.WaitGroup
	for name, call := range calls {
		for _, end := range []string{"deadline", "cancel"} {
			wg.Go(func() {
				cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				defer cancel()
				if end == "cancel" {
					cctx, cancel = context.WithCancel(ctx)
					time.AfterFunc(200*time.Millisecond, cancel)
				}
				start := time.Now()
				err := call(cctx)
				took := time.Since(start)
				assert.Error(t, err, "%s (%s) on a hung server", name, end)
				assert.False(t, driver.Replied(err), "%s (%s): %v is not a reply", name, end, err)
				assert.Less(t, took, bound, "%s (%s) did not return", name, end)
			})
		}
	}
	wg.Wait()

	require.NoError(t, srv.Resume())
	resumed = true
	require.Eventually(t, func() bool {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		ok, err := conn.SetNX(cctx, "hung:after", "v", time.Minute)
		return err == nil && ok
	}, callTimeout, 50*time.Millisecond, "the Conn answers once the server does")
	// The calls given up end: none of them keeps a goroutine.
	assert.Eventually(t, func() bool { return runtime.NumGoroutine() <= baseline+10 },
		callTimeout, 50*time.Millisecond, "goroutines left behind the hung server")
}
