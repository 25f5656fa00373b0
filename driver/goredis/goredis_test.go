package goredis

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/driver"
	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
)

// These tests check the adapter against the contract of package driver, on
// miniredis where it speaks the command as Redis does and on real
// redis-server processes (RESP3, go-redis's default, and RESP2) elsewhere.

// callTimeout bounds every test's calls: far above what a loaded machine
// needs, far below the test binary's own timeout.
const callTimeout = 30 * time.Second

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	t.Cleanup(cancel)
	return ctx
}

// protocols are the RESP versions a go-redis client may speak.
var protocols = []int{3, 2}

// client is redistest.Client speaking protocol.
func client(t *testing.T, addr string, protocol int) *redis.Client {
	t.Helper()
	o := redistest.Options(addr)
	o.Protocol = protocol
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// backends returns clients of miniredis and of a real redis-server in both
// protocols, for the commands that must behave the same on all of them.
func backends(t *testing.T) map[string]*redis.Client {
	t.Helper()
	mini := miniredis.RunT(t)
	real := redistest.Start(t, redisserver.Options{})
	return map[string]*redis.Client{
		"miniredis":          redistest.Client(t, mini.Addr()),
		"redis-server/resp3": client(t, real.Addr(), 3),
		"redis-server/resp2": client(t, real.Addr(), 2),
	}
}

// recorder is a wrapper that exposes only Process: it records the
// arguments of each command the adapter sends.
type recorder struct {
	c *redis.Client

	mu   sync.Mutex
	sent [][]any
}

func (r *recorder) Process(ctx context.Context, cmd redis.Cmder) error {
	r.mu.Lock()
	r.sent = append(r.sent, cmd.Args())
	r.mu.Unlock()
	return r.c.Process(ctx, cmd)
}

// names returns the names of the commands sent since the last call.
func (r *recorder) names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var names []string
	for _, args := range r.sent {
		names = append(names, strings.ToLower(fmt.Sprint(args[0])))
	}
	r.sent = nil
	return names
}

// tracing is a middleware that wraps every error, as tracing wrappers do.
type tracing struct{ c *redis.Client }

func (w tracing) Process(ctx context.Context, cmd redis.Cmder) error {
	if err := w.c.Process(ctx, cmd); err != nil {
		return fmt.Errorf("traced: %w", err)
	}
	return nil
}

// tracingHook is the go-redis hook that wraps every error of a command.
type tracingHook struct{}

func (tracingHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (tracingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := next(ctx, cmd); err != nil {
			return fmt.Errorf("traced: %w", err)
		}
		return nil
	}
}

func (tracingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// foreign is a driver.Conn of another adapter.
type foreign struct{}

func (foreign) SetNX(context.Context, string, string, time.Duration) (bool, error) {
	return false, nil
}

func (foreign) Eval(context.Context, *driver.Script, []string, ...any) (any, error) {
	return nil, nil
}

// refusedAddr returns a loopback address that refuses connections.
func refusedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// silentAddr returns the address of a server that accepts connections and
// never replies, closed when the test ends.
func silentAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		conns  []net.Conn
		closed bool
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if closed {
				mu.Unlock()
				_ = c.Close()
				return
			}
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(io.Discard, c) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		closed = true
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func TestSetNX(t *testing.T) {
	for name, c := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			conn := Conn(c)
			key := "setnx:" + name

			ok, err := conn.SetNX(ctx, key, "token-1", time.Hour)
			require.NoError(t, err)
			assert.True(t, ok, "an absent key is set")
			assert.Equal(t, "token-1", c.Get(ctx, key).Val())
			pttl := c.PTTL(ctx, key).Val()
			assert.LessOrEqual(t, pttl, time.Hour)
			assert.Greater(t, pttl, time.Hour-time.Minute)

			ok, err = conn.SetNX(ctx, key, "token-2", time.Hour)
			require.NoError(t, err, "a key that exists is a nil reply, not an error")
			assert.False(t, ok)
			assert.Equal(t, "token-1", c.Get(ctx, key).Val(), "the holder's value stays")

			hash := key + ":hash"
			require.NoError(t, c.HSet(ctx, hash, "f", "v").Err())
			ok, err = conn.SetNX(ctx, hash, "token", time.Hour)
			require.NoError(t, err, "SET NX on a key of another type is a nil reply")
			assert.False(t, ok)
			assert.Equal(t, "hash", c.Type(ctx, hash).Val())
		})
	}
}

func TestSetNXWholeMilliseconds(t *testing.T) {
	ctx := testCtx(t)
	mini := miniredis.RunT(t)
	rec := &recorder{c: redistest.Client(t, mini.Addr())}
	conn := Conn(rec)

	// Each TTL differs from the one before, then one comes again: the
	// boxed PX argument must follow the TTL, not the last call.
	ttls := []time.Duration{
		time.Hour + 999*time.Microsecond,
		1500 * time.Millisecond,
		time.Hour + 999*time.Microsecond,
		2 * time.Hour,
	}
	for i, ttl := range ttls {
		key := "px:" + strconv.Itoa(i)
		ok, err := conn.SetNX(ctx, key, "v", ttl)
		require.NoError(t, err)
		require.True(t, ok)
		rec.mu.Lock()
		sent := rec.sent[len(rec.sent)-1]
		rec.mu.Unlock()
		assert.Equal(t, []any{"set", key, "v", "px", ttl.Milliseconds(), "nx"}, sent)
		assert.Equal(t, ttl.Truncate(time.Millisecond), mini.TTL(key), "PX is the TTL in whole milliseconds")
	}
}

func TestConcurrentCalls(t *testing.T) {
	ctx := testCtx(t)
	srv := redistest.Start(t, redisserver.Options{})
	c := redistest.Client(t, srv.Addr())
	conn := Conn(c)
	// A script new to the server and to the adapter's cache, first run by
	// many goroutines at once.
	script := driver.NewScript("return {KEYS[1], ARGV[1]} -- " + t.Name())

	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			ttl := time.Duration(g+1) * time.Hour
			for i := range 20 {
				key := fmt.Sprintf("concurrent:%d:%d", g, i)
				ok, err := conn.SetNX(ctx, key, "v", ttl)
				if !assert.NoError(t, err) || !assert.True(t, ok) {
					return
				}
				pttl := c.PTTL(ctx, key).Val()
				assert.True(t, pttl <= ttl && pttl > ttl-time.Minute, "%s has PTTL %v, want %v", key, pttl, ttl)
				v, err := conn.Eval(ctx, script, []string{key}, g)
				assert.NoError(t, err)
				assert.Equal(t, []any{key, strconv.Itoa(g)}, v)
			}
		})
	}
	wg.Wait()
}

func TestSetNXHonoursContext(t *testing.T) {
	t.Run("cancelled", func(t *testing.T) {
		srv := redistest.Start(t, redisserver.Options{})
		c := redistest.Client(t, srv.Addr())
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		ok, err := Conn(c).SetNX(ctx, "cancelled", "v", time.Hour)
		require.ErrorIs(t, err, context.Canceled)
		assert.False(t, ok)
		assert.False(t, driver.Replied(err), "a context error is not a reply")
		assert.Zero(t, c.Exists(testCtx(t), "cancelled").Val(), "nothing was sent")
	})
	t.Run("deadline", func(t *testing.T) {
		// A server that never replies, and a read timeout far beyond the
		// deadline: only ctx can end the call soon.
		c := redis.NewClient(&redis.Options{
			Addr:                  silentAddr(t),
			MaxRetries:            -1,
			ContextTimeoutEnabled: true,
			ReadTimeout:           time.Minute,
			WriteTimeout:          time.Minute,
		})
		t.Cleanup(func() { _ = c.Close() })
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := Conn(c).SetNX(ctx, "hung", "v", time.Hour)
		require.Error(t, err)
		assert.Less(t, time.Since(start), 30*time.Second, "the call outlived its context")
		assert.False(t, driver.Replied(err), "%v is not a reply", err)
	})
}

func TestEval(t *testing.T) {
	for name, c := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			conn := Conn(c)
			key := "eval:" + name

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
				{"empty array", "return {}", nil, []any{}},
				{"args", "return {KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]}",
					[]any{"s", 7, int64(-8), uint64(math.MaxUint64), uint64(0)},
					[]any{key, "s", "7", "-8", "18446744073709551615", "0"}},
				{"arithmetic on args", "return tonumber(ARGV[1]) + tonumber(ARGV[2])", []any{40, int64(2)}, int64(42)},
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
				hash := key + ":hash"
				require.NoError(t, c.HSet(ctx, hash, "f", "v").Err())
				_, err := conn.Eval(ctx, driver.NewScript("return redis.call('get', KEYS[1])"), []string{hash})
				var re *driver.ReplyError
				require.ErrorAs(t, err, &re)
				assert.Contains(t, re.Msg, "WRONGTYPE")
				if name != "miniredis" { // which reports it as a compile error
					assert.True(t, strings.HasPrefix(re.Msg, "WRONGTYPE"), "%q is not the server's message", re.Msg)
				}
				assert.NotErrorIs(t, err, driver.Nil)
				assert.True(t, driver.Replied(err), "an error reply is a reply")
			})
			t.Run("error_reply", func(t *testing.T) {
				_, err := conn.Eval(ctx, driver.NewScript("return redis.error_reply('MYERR boom')"), nil)
				var re *driver.ReplyError
				require.ErrorAs(t, err, &re)
				assert.True(t, strings.HasPrefix(re.Msg, "MYERR boom"), "%q is not the script's error", re.Msg)
			})
		})
	}
}

func TestEvalBySHA(t *testing.T) {
	for name, c := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			rec := &recorder{c: c}
			conn := Conn(rec)
			script := driver.NewScript("return ARGV[1] -- " + t.Name())

			v, err := conn.Eval(ctx, script, nil, "first")
			require.NoError(t, err)
			assert.Equal(t, "first", v)
			assert.Equal(t, []string{"evalsha", "eval"}, rec.names(), "the server lacks it: SHA, then source")
			assert.Equal(t, []bool{true}, c.ScriptExists(ctx, script.Hash()).Val())

			v, err = conn.Eval(ctx, script, nil, "second")
			require.NoError(t, err)
			assert.Equal(t, "second", v)
			assert.Equal(t, []string{"evalsha"}, rec.names(), "the server has it: SHA only")

			require.NoError(t, c.ScriptFlush(ctx).Err())
			v, err = conn.Eval(ctx, script, nil, "after flush")
			require.NoError(t, err, "the first call after SCRIPT FLUSH")
			assert.Equal(t, "after flush", v)
			assert.Equal(t, []string{"evalsha", "eval"}, rec.names())
		})
	}
}

// TestWrappedReplies: a hook or a wrapper that wraps go-redis's errors
// leaves the replies what they are.
func TestWrappedReplies(t *testing.T) {
	srv := redistest.Start(t, redisserver.Options{})
	hooked := redistest.Client(t, srv.Addr())
	hooked.AddHook(tracingHook{})
	plain := redistest.Client(t, srv.Addr())
	clients := map[string]Client{
		"hook":       hooked,
		"middleware": tracing{plain},
	}
	for name, c := range clients {
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			conn := Conn(c)
			key := "wrapped:" + name

			// The wrapping is in place: go-redis's own call sees it.
			err := c.Process(ctx, redis.NewStringCmd(ctx, "get", key))
			require.ErrorIs(t, err, redis.Nil)
			require.True(t, strings.HasPrefix(err.Error(), "traced: "), "%v is not wrapped", err)

			ok, err := conn.SetNX(ctx, key, "token-1", time.Hour)
			require.NoError(t, err)
			require.True(t, ok)
			ok, err = conn.SetNX(ctx, key, "token-2", time.Hour)
			require.NoError(t, err, "a wrapped nil reply is still a key that exists")
			assert.False(t, ok)

			// Loaded first, so that these calls need no fallback to EVAL.
			nilScript := driver.NewScript("return nil")
			wrongType := driver.NewScript("return redis.call('hget', KEYS[1], 'f')")
			for _, s := range []*driver.Script{nilScript, wrongType} {
				require.NoError(t, plain.ScriptLoad(ctx, s.Source()).Err())
			}
			_, err = conn.Eval(ctx, nilScript, nil)
			assert.ErrorIs(t, err, driver.Nil)
			_, err = conn.Eval(ctx, wrongType, []string{key})
			var re *driver.ReplyError
			if assert.ErrorAs(t, err, &re) {
				assert.True(t, strings.HasPrefix(re.Msg, "WRONGTYPE"), "%q is not the server's message", re.Msg)
			}

			script := driver.NewScript("return 'ran' -- " + t.Name())
			require.NoError(t, plain.ScriptFlush(ctx).Err())
			v, err := conn.Eval(ctx, script, nil)
			require.NoError(t, err, "a wrapped NOSCRIPT must fall back to EVAL")
			assert.Equal(t, "ran", v)
		})
	}
}

func TestErrorsWithoutReply(t *testing.T) {
	t.Run("refused", func(t *testing.T) {
		ctx := testCtx(t)
		conn := Conn(redistest.Client(t, refusedAddr(t)))
		ok, err := conn.SetNX(ctx, "k", "v", time.Hour)
		require.Error(t, err)
		assert.False(t, ok)
		assert.False(t, driver.Replied(err), "%v is not a reply", err)
		var op *net.OpError
		require.ErrorAs(t, err, &op, "a refused dial stays a *net.OpError")
		assert.Equal(t, "dial", op.Op)

		_, err = conn.Eval(ctx, driver.NewScript("return 1"), nil)
		require.Error(t, err)
		assert.False(t, driver.Replied(err), "%v is not a reply", err)

		_, err = conn.(driver.Inspector).Info(ctx, "server")
		require.Error(t, err)
		assert.False(t, driver.Replied(err), "%v is not a reply", err)
	})
	t.Run("context", func(t *testing.T) {
		mini := miniredis.RunT(t)
		conn := Conn(redistest.Client(t, mini.Addr()))
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := conn.Eval(ctx, driver.NewScript("return 1"), nil)
		require.ErrorIs(t, err, context.Canceled)
		assert.False(t, driver.Replied(err))
	})
}

func setting(t *testing.T, d driver.Description, name string) driver.Setting {
	t.Helper()
	for _, s := range d.Settings {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no setting %s in %+v", name, d.Settings)
	return driver.Setting{}
}

// The Describe tests make clients but do no I/O: no server is needed.
func TestDescribeClient(t *testing.T) {
	t.Run("never retries", func(t *testing.T) {
		c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6390", MaxRetries: -1, PoolSize: 7, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		d := Conn(c).(driver.Describer).Describe()
		assert.Same(t, c, d.Client)
		assert.Equal(t, "127.0.0.1:6390", d.Addr)
		assert.Nil(t, d.Cluster)
		assert.Empty(t, d.Unsafe)
		assert.True(t, d.NeverRetries)
		assert.Len(t, d.Settings, 3)
		assert.Equal(t, driver.Setting{Name: "ContextTimeoutEnabled", Value: "true",
			Why: "calls given up at the node timeout free their connection at once"},
			setting(t, d, "ContextTimeoutEnabled"))
		assert.Equal(t, driver.Setting{Name: "PoolSize", Value: "7",
			Why: "at most this many connections wait on a master that hangs"},
			setting(t, d, "PoolSize"))
		assert.Equal(t, driver.Setting{Name: "MaxRetries", Value: "0",
			Why: "a failed command is not sent again: a failure costs no more than one try"},
			setting(t, d, "MaxRetries"))
	})
	t.Run("go-redis defaults", func(t *testing.T) {
		c := redis.NewClient(&redis.Options{Addr: "localhost:6391"})
		t.Cleanup(func() { _ = c.Close() })
		d := Conn(c).(driver.Describer).Describe()
		assert.Equal(t, "localhost:6391", d.Addr)
		assert.False(t, d.NeverRetries, "go-redis retries 3 times by default")
		ctxTimeout := setting(t, d, "ContextTimeoutEnabled")
		assert.Equal(t, "false", ctxTimeout.Value)
		assert.True(t, ctxTimeout.Warn)
		assert.Contains(t, ctxTimeout.Why, fmt.Sprintf("ReadTimeout (%v)", c.Options().ReadTimeout))
		retries := setting(t, d, "MaxRetries")
		assert.Equal(t, "3", retries.Value)
		assert.True(t, retries.Warn)
		pool := setting(t, d, "PoolSize")
		assert.Equal(t, strconv.Itoa(c.Options().PoolSize), pool.Value)
		assert.False(t, pool.Warn)
	})
	t.Run("failover", func(t *testing.T) {
		c := redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName:    "mymaster",
			SentinelAddrs: []string{"127.0.0.1:26379", "127.0.0.1:26380"},
			MaxRetries:    -1,
		})
		t.Cleanup(func() { _ = c.Close() })
		d := Conn(c).(driver.Describer).Describe()
		assert.Same(t, c, d.Client)
		assert.Empty(t, d.Addr, "a failover client names no one server")
		assert.Nil(t, d.Cluster)
		assert.Empty(t, d.Unsafe)
		assert.True(t, d.NeverRetries)
		assert.Len(t, d.Settings, 3)
	})
}

func TestDescribeCluster(t *testing.T) {
	addrs := []string{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = c.Close() })
	conn := Conn(c)
	d := conn.(driver.Describer).Describe()
	assert.Same(t, c, d.Client)
	assert.Equal(t, addrs, d.Cluster)
	assert.Empty(t, d.Addr)
	assert.Empty(t, d.Unsafe)
	assert.False(t, d.NeverRetries, "a cluster client follows redirects")
	assert.Len(t, d.Settings, 3)
	assert.True(t, setting(t, d, "ContextTimeoutEnabled").Warn)

	d.Cluster[0] = "changed"
	assert.Equal(t, addrs[0], c.Options().Addrs[0], "Cluster is a copy")
	assert.Equal(t, addrs, conn.(driver.Describer).Describe().Cluster)
}

func TestDescribeRing(t *testing.T) {
	c := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:7100", "b": "127.0.0.1:7101"}})
	t.Cleanup(func() { _ = c.Close() })
	d := Conn(c).(driver.Describer).Describe()
	assert.Same(t, c, d.Client)
	assert.NotEmpty(t, d.Unsafe, "a ring is not one failure domain")
	assert.Empty(t, d.Addr)
	assert.Nil(t, d.Cluster)
	assert.False(t, d.NeverRetries)
}

func TestDescribeWrapper(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6392", MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	w := &recorder{c: c}
	d := Conn(w).(driver.Describer).Describe()
	assert.Equal(t, driver.Description{Client: w}, d, "a wrapper says only what it is")
}

func TestConnNil(t *testing.T) {
	assert.Nil(t, Conn(nil))
	assert.Nil(t, Conn((*redis.Client)(nil)))
	assert.Nil(t, Conn((*redis.ClusterClient)(nil)))
	assert.Nil(t, Conn((*recorder)(nil)))

	a := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6393"})
	b := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6394"})
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	conns := Masters(a, nil, b)
	require.Len(t, conns, 3)
	assert.Same(t, a, Unwrap(conns[0]))
	assert.Nil(t, conns[1], "a nil client stays nil at its index")
	assert.Same(t, b, Unwrap(conns[2]))
	assert.Empty(t, Masters[*redis.Client]())
}

func TestUnwrap(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6395"})
	t.Cleanup(func() { _ = c.Close() })
	w := &recorder{c: c}
	assert.Same(t, c, Unwrap(Conn(c)))
	assert.Same(t, w, Unwrap(Conn(w)))
	assert.Nil(t, Unwrap(foreign{}))
	assert.Nil(t, Unwrap(nil))
}

func TestCapabilities(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6396"})
	failover := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:26381"}})
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:7200"}})
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:7300"}})
	t.Cleanup(func() { _ = c.Close(); _ = failover.Close(); _ = cluster.Close(); _ = ring.Close() })

	tests := []struct {
		name       string
		c          Client
		subscriber bool
	}{
		{"Client", c, true},
		{"FailoverClient", failover, true},
		{"ClusterClient", cluster, true},
		{"Ring", ring, true},
		{"only Process", &recorder{c: c}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := Conn(tt.c)
			_, ok := conn.(driver.Subscriber)
			assert.Equal(t, tt.subscriber, ok, "Subscriber")
			_, ok = conn.(driver.Inspector)
			assert.True(t, ok, "Inspector")
			_, ok = conn.(driver.Describer)
			assert.True(t, ok, "Describer")
		})
	}
}

// receive returns the next push, failing the test on an error.
func receive(t *testing.T, ctx context.Context, sub driver.Subscription) driver.Push {
	t.Helper()
	p, err := sub.Receive(ctx)
	require.NoError(t, err)
	return p
}

// syncSub sends a PING and waits for its pong: every command sent before it
// has then taken effect.
func syncSub(t *testing.T, ctx context.Context, sub driver.Subscription, payload string) {
	t.Helper()
	require.NoError(t, sub.Ping(ctx, payload))
	assert.Equal(t, driver.Push{Pong: true, Payload: payload}, receive(t, ctx, sub))
}

func subscribe(t *testing.T, c *redis.Client) driver.Subscription {
	t.Helper()
	s, ok := Conn(c).(driver.Subscriber)
	require.True(t, ok)
	sub := s.Subscribe(t.Context())
	t.Cleanup(func() { _ = sub.Close() })
	return sub
}

func TestSubscription(t *testing.T) {
	srv := redistest.Start(t, redisserver.Options{})
	publisher := redistest.Client(t, srv.Addr())
	for _, protocol := range protocols {
		t.Run("resp"+strconv.Itoa(protocol), func(t *testing.T) {
			ctx := testCtx(t)
			sub := subscribe(t, client(t, srv.Addr(), protocol))
			channel := "wake:" + strconv.Itoa(protocol)

			require.NoError(t, sub.Subscribe(ctx, channel))
			// The subscription's confirmation is not a Push: the pong
			// comes first.
			syncSub(t, ctx, sub, "subscribed")

			require.Equal(t, int64(1), publisher.Publish(ctx, channel, "hello").Val())
			assert.Equal(t, driver.Push{Channel: channel, Payload: "hello"}, receive(t, ctx, sub))

			require.NoError(t, sub.Unsubscribe(ctx, channel))
			syncSub(t, ctx, sub, "unsubscribed")
			assert.Zero(t, publisher.Publish(ctx, channel, "unheard").Val(), "no subscriber is left")

			require.NoError(t, sub.Subscribe(ctx, channel))
			syncSub(t, ctx, sub, "again")
			require.Equal(t, int64(1), publisher.Publish(ctx, channel, "heard").Val())
			assert.Equal(t, driver.Push{Channel: channel, Payload: "heard"}, receive(t, ctx, sub))
		})
	}
}

func TestSubscriptionCloseEndsReceive(t *testing.T) {
	srv := redistest.Start(t, redisserver.Options{})
	sub := subscribe(t, redistest.Client(t, srv.Addr()))
	ctx := testCtx(t)
	require.NoError(t, sub.Subscribe(ctx, "quiet"))
	syncSub(t, ctx, sub, "ready")

	done := make(chan error, 1)
	go func() {
		// No deadline of its own: only Close can end it.
		_, err := sub.Receive(t.Context())
		done <- err
	}()
	time.Sleep(50 * time.Millisecond) // let Receive wait, most often
	require.NoError(t, sub.Close())
	select {
	case err := <-done:
		require.Error(t, err)
		assert.False(t, driver.Replied(err), "%v is not a reply", err)
	case <-time.After(callTimeout):
		t.Fatal("Close did not end the Receive that waits")
	}
}

func TestSubscriptionLostConnection(t *testing.T) {
	srv := redistest.Start(t, redisserver.Options{})
	admin := redistest.Client(t, srv.Addr())
	sub := subscribe(t, redistest.Client(t, srv.Addr()))
	ctx := testCtx(t)
	require.NoError(t, sub.Subscribe(ctx, "lost"))
	syncSub(t, ctx, sub, "ready")

	killed, err := admin.ClientKillByFilter(ctx, "TYPE", "pubsub").Result()
	require.NoError(t, err)
	require.Equal(t, int64(1), killed)

	_, err = sub.Receive(ctx)
	require.Error(t, err, "the call that meets the lost connection reports it")
	assert.False(t, driver.Replied(err), "%v is not a reply", err)

	// The next calls connect again, subscribed to the same channel.
	syncSub(t, ctx, sub, "back")
	require.Equal(t, int64(1), admin.Publish(ctx, "lost", "found").Val())
	assert.Equal(t, driver.Push{Channel: "lost", Payload: "found"}, receive(t, ctx, sub))
}

func TestSubscribeNeedsNoIO(t *testing.T) {
	ctx := testCtx(t)
	s := Conn(redistest.Client(t, refusedAddr(t))).(driver.Subscriber)
	sub := s.Subscribe(ctx)
	require.NotNil(t, sub, "no server is needed before the first call")
	err := sub.Subscribe(ctx, "nowhere")
	require.Error(t, err)
	assert.False(t, driver.Replied(err), "%v is not a reply", err)
	assert.NoError(t, sub.Close())
}

func TestInspector(t *testing.T) {
	srv := redistest.Start(t, redisserver.Options{})
	for _, protocol := range protocols {
		t.Run("resp"+strconv.Itoa(protocol), func(t *testing.T) {
			ctx := testCtx(t)
			in := Conn(client(t, srv.Addr(), protocol)).(driver.Inspector)

			info, err := in.Info(ctx, "server")
			require.NoError(t, err)
			assert.Contains(t, info, "run_id:")
			assert.NotContains(t, info, "used_memory:", "only the server section")

			info, err = in.Info(ctx, "")
			require.NoError(t, err)
			assert.Contains(t, info, "run_id:")
			assert.Contains(t, info, "used_memory:", "the default sections")

			now, err := in.Time(ctx)
			require.NoError(t, err)
			assert.WithinDuration(t, time.Now(), now, time.Minute)

			cfg, err := in.ConfigGet(ctx, "appendonly")
			require.NoError(t, err)
			assert.Equal(t, map[string]string{"appendonly": "no"}, cfg, "redisserver starts it without persistence")

			cfg, err = in.ConfigGet(ctx, "maxmemory-policy")
			require.NoError(t, err)
			assert.Equal(t, map[string]string{"maxmemory-policy": "noeviction"}, cfg)
		})
	}
}

func TestInspectorErrorReply(t *testing.T) {
	srv := redistest.Start(t, redisserver.Options{Args: []string{"--rename-command", "CONFIG", ""}})
	ctx := testCtx(t)
	in := Conn(redistest.Client(t, srv.Addr())).(driver.Inspector)
	_, err := in.ConfigGet(ctx, "appendonly")
	var re *driver.ReplyError
	require.ErrorAs(t, err, &re, "a server without CONFIG replies with an error")
	assert.Contains(t, re.Msg, "unknown command")
	assert.True(t, driver.Replied(err))
}
