package memredis

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/driver"
	"quorumlock.dev/driver/goredis"
	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
)

// step is one call, made on both servers.
type step struct {
	name string
	src  string // a script; "" for SetNX of keys[0] to args[0] for a minute
	keys []string
	args []any
}

// TestSameRepliesAsRedis runs the same calls on an in-memory server and a
// real redis-server and compares the replies: every command the shipped
// scripts send, the type conversions both ways, and the shipped scripts
// themselves. Replies that carry the clock (TIME, PTTL, queue stamps) are
// compared by shape, the rest exactly.
func TestSameRepliesAsRedis(t *testing.T) {
	real := goredis.Conn(redistest.Client(t, redistest.Start(t, redisserver.Options{}).Addr()))
	mem := New().Conn()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	steps := []step{
		{name: "setnx absent", keys: []string{"k"}, args: []any{"v1"}},
		{name: "setnx present", keys: []string{"k"}, args: []any{"v2"}},
		{name: "get", src: "return redis.call('GET', KEYS[1])", keys: []string{"k"}},
		{name: "get missing is false, returned as nil", src: "return redis.call('GET', 'nope')"},
		{name: "numbers and strings", src: "return {1, 'a', 2.9, -3, {4, 'b'}}"},
		{name: "true and false", src: "return {true, false, 7}"},
		{name: "status", src: "return redis.call('SET', KEYS[1], 'x')", keys: []string{"s"}},
		{name: "status table", src: "return redis.status_reply and {ok='FINE'} or {ok='FINE'}"},
		{name: "error table", src: "return {err='ERR custom'}"},
		{name: "args are strings", src: "return {ARGV[1], ARGV[2], ARGV[3], type(ARGV[2])}", args: []any{"a", int64(42), uint64(7)}},
		{name: "number args to redis.call", src: "redis.call('SET', KEYS[1], 1700000000000) return redis.call('GET', KEYS[1])", keys: []string{"n"}},
		{name: "set px, pttl", src: "redis.call('SET', KEYS[1], 'v', 'PX', 5000) local t = redis.call('PTTL', KEYS[1]) return {t > 4000, t <= 5000}", keys: []string{"p"}},
		{name: "pttl no expiry, missing", src: "redis.call('SET', KEYS[1], 'v') return {redis.call('PTTL', KEYS[1]), redis.call('PTTL', 'missing')}", keys: []string{"q"}},
		{name: "pexpire, persist", src: "return {redis.call('PEXPIRE', KEYS[1], 9000), redis.call('PEXPIRE', 'missing', 10), redis.call('PERSIST', KEYS[1]), redis.call('PERSIST', KEYS[1]), redis.call('PTTL', KEYS[1])}", keys: []string{"q"}},
		{name: "exists, del", src: "return {redis.call('EXISTS', KEYS[1]), redis.call('DEL', KEYS[1]), redis.call('EXISTS', KEYS[1]), redis.call('DEL', KEYS[1])}", keys: []string{"q"}},
		{name: "incr decr", src: "return {redis.call('INCR', KEYS[1]), redis.call('INCR', KEYS[1]), redis.call('DECR', KEYS[1])}", keys: []string{"c"}},
		{name: "incr not an integer", src: "return redis.pcall('INCR', KEYS[1])", keys: []string{"k"}},
		{name: "hset hget hgetall", src: "return {redis.call('HSET', KEYS[1], 'v', 'x', 'f', 3), redis.call('HSET', KEYS[1], 'v', 'y'), redis.call('HGET', KEYS[1], 'v'), redis.call('HGET', KEYS[1], 'nope'), redis.call('HGETALL', KEYS[1])}", keys: []string{"h"}},
		{name: "wrongtype", src: "return redis.call('GET', KEYS[1])", keys: []string{"h"}},
		{name: "wrongtype pcall", src: "local r = redis.pcall('GET', KEYS[1]) return type(r) == 'table' and r.err ~= nil", keys: []string{"h"}},
		{name: "setnx on a hash", keys: []string{"h"}, args: []any{"v"}},
		{name: "zadd zrange", src: "return {redis.call('ZADD', KEYS[1], 3, 'c'), redis.call('ZADD', KEYS[1], 1, 'a'), redis.call('ZADD', KEYS[1], 2, 'b'), redis.call('ZADD', KEYS[1], 2, 'b'), redis.call('ZADD', KEYS[1], 1.5, 'ab'), redis.call('ZRANGE', KEYS[1], 0, -1)}", keys: []string{"z"}},
		{name: "zrange slices", src: "return {redis.call('ZRANGE', KEYS[1], 0, 0), redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES'), redis.call('ZRANGE', KEYS[1], 0, 63), redis.call('ZRANGE', KEYS[1], 5, 9), redis.call('ZRANGE', 'none', 0, 0)[1] == nil}", keys: []string{"z"}},
		{name: "zscore", src: "return {redis.call('ZSCORE', KEYS[1], 'ab'), redis.call('ZSCORE', KEYS[1], 'c'), redis.call('ZSCORE', KEYS[1], 'nope')}", keys: []string{"z"}},
		{name: "zrangebyscore", src: "return {redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', 2), redis.call('ZRANGEBYSCORE', KEYS[1], '(1', '+inf'), redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', 0)}", keys: []string{"z"}},
		{name: "zrem zremrangebyscore", src: "return {redis.call('ZREM', KEYS[1], 'a', 'nope'), redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', 2), redis.call('ZRANGE', KEYS[1], 0, -1), redis.call('ZREM', KEYS[1], 'c'), redis.call('EXISTS', KEYS[1])}", keys: []string{"z"}},
		{name: "publish to nobody", src: "return redis.call('PUBLISH', KEYS[1], 'x')", keys: []string{"ch"}},
		{name: "time shape", src: "local t = redis.call('TIME') return {#t, type(t[1]), type(t[2]), tonumber(t[2]) < 1000000}"},
		{name: "command names in any case", src: "redis.call('sEt', KEYS[1], 'm') return {redis.call('Get', KEYS[1]), redis.call('get', KEYS[1])}", keys: []string{"mc"}},
		{name: "too few arguments", src: "return redis.pcall('GET')"},
		{name: "math and string libs", src: "return {math.max(1, 5), string.format('%d', 7), tonumber('12') + 1, tostring(3) .. 'x'}"},
	}
	for _, sc := range shippedScripts(t) {
		steps = append(steps, sc...)
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			want, werr := call(ctx, real, s)
			got, gerr := call(ctx, mem, s)
			if werr != nil || gerr != nil {
				require.Error(t, gerr, "redis-server failed: %v", werr)
				require.Error(t, werr, "memredis failed: %v", gerr)
				assert.Equal(t, errors.Is(werr, driver.Nil), errors.Is(gerr, driver.Nil), "nil reply: %v vs %v", werr, gerr)
				var wr, gr *driver.ReplyError
				assert.Equal(t, errors.As(werr, &wr), errors.As(gerr, &gr), "error reply: %v vs %v", werr, gerr)
				if wr != nil && gr != nil {
					assert.Equal(t, firstWord(wr.Msg), firstWord(gr.Msg), "%q vs %q", wr.Msg, gr.Msg)
				}
				return
			}
			assert.Equal(t, want, got)
		})
	}
}

func firstWord(s string) string { w, _, _ := strings.Cut(s, " "); return w }

func call(ctx context.Context, c driver.Conn, s step) (any, error) {
	if s.src == "" {
		return c.SetNX(ctx, s.keys[0], s.args[0].(string), time.Minute)
	}
	return c.Eval(ctx, driver.NewScript(s.src), s.keys, s.args...)
}

// shippedScripts are calls of the lock's and the fence's scripts whose
// replies carry no clock.
func shippedScripts(t *testing.T) [][]step {
	read := func(path string) string {
		b, err := os.ReadFile(filepath.Join("..", "..", "..", path))
		require.NoError(t, err)
		return string(b)
	}
	queue := read("redlock/internal/fair/scripts/queue.lua")
	release, extend := queue+read("redlock/scripts/release.lua"), read("redlock/scripts/extend.lua")
	all, holder := read("redlock/scripts/acquire_all.lua"), read("redlock/scripts/holder.lua")
	guard, seed := read("fence/scripts/guardset.lua"), read("fence/scripts/seed.lua")
	return [][]step{{
		{name: "shipped: take r1", keys: []string{"lock:r1"}, args: []any{"tok"}},
		{name: "shipped: holder", src: "local r = (function() " + holder + " end)() return {r[1], r[2] > 0}", keys: []string{"lock:r1"}},
		{name: "shipped: extend ours", src: extend, keys: []string{"lock:r1"}, args: []any{"tok", int64(90000)}},
		{name: "shipped: extend not ours", src: extend, keys: []string{"lock:r1"}, args: []any{"other", int64(90000)}},
		{name: "shipped: release not ours", src: release, keys: []string{"lock:r1"}, args: []any{"other"}},
		{name: "shipped: release ours", src: release, keys: []string{"lock:r1"}, args: []any{"tok"}},
		{name: "shipped: release gone", src: release, keys: []string{"lock:r1"}, args: []any{"tok"}},
		{name: "shipped: acquire all", src: all, keys: []string{"lock:{o}a", "lock:{o}b"}, args: []any{"tok", int64(60000)}},
		{name: "shipped: acquire all again", src: all, keys: []string{"lock:{o}a", "lock:{o}b"}, args: []any{"tok2", int64(60000)}},
		{name: "shipped: guard set", src: guard, keys: []string{"stock"}, args: []any{"99", uint64(5), int64(0), int64(1)}},
		{name: "shipped: guard stale", src: guard, keys: []string{"stock"}, args: []any{"98", uint64(4), int64(0), int64(1)}},
		{name: "shipped: guard newer", src: guard, keys: []string{"stock"}, args: []any{"97", uint64(6), int64(60000), int64(0)}},
		{name: "shipped: hgetall", src: "return redis.call('HGETALL', KEYS[1])", keys: []string{"stock"}},
		{name: "shipped: seed", src: seed, keys: []string{"fence:r"}, args: []any{uint64(1000)}},
		{name: "shipped: seed lower", src: seed, keys: []string{"fence:r"}, args: []any{uint64(10)}},
		{name: "shipped: seeded value", src: "return tonumber(redis.call('GET', KEYS[1])) > 1000", keys: []string{"fence:r"}},
	}}
}

// Keys expire on the server's clock, which a bubble makes virtual; a
// stepped clock moves expiry.
func TestExpiryVirtual(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New()
		c := s.Conn()
		ctx := context.Background()
		ok, err := c.SetNX(ctx, "k", "v", time.Second)
		require.NoError(t, err)
		require.True(t, ok)
		time.Sleep(999 * time.Millisecond)
		_, held := s.Get("k")
		assert.True(t, held, "expired early")
		time.Sleep(time.Millisecond)
		_, held = s.Get("k")
		assert.False(t, held, "not expired at its TTL")

		s.Set("k", "v", time.Minute)
		s.StepClock(2 * time.Minute)
		_, held = s.Get("k")
		assert.False(t, held, "a stepped clock does not expire keys")
	})
}

// A clock running fast expires keys early by its rate, and says when by
// time.Now; a restart from a snapshot keeps what the snapshot had and loses
// what came after it.
func TestClockRateAndSnapshotVirtual(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New()
		ctx := context.Background()
		s.Set("k", "v", time.Second)
		s.SetClockRate(2)
		assert.Equal(t, time.Now().Add(500*time.Millisecond), s.ExpiresAt("k"))
		time.Sleep(499 * time.Millisecond)
		_, held := s.Get("k")
		assert.True(t, held, "expired before its time on a clock twice as fast")
		time.Sleep(time.Millisecond)
		_, held = s.Get("k")
		assert.False(t, held, "a clock twice as fast did not expire the key at half its TTL")
		s.SetClockRate(1)
		before, err := conn{s}.Time(ctx)
		require.NoError(t, err)
		time.Sleep(time.Second)
		after, err := conn{s}.Time(ctx)
		require.NoError(t, err)
		assert.Equal(t, time.Second, after.Sub(before), "the rate set back to 1 still runs fast")

		s.Set("old", "1", time.Minute)
		s.Set("brief", "1", 10*time.Millisecond)
		snap := s.Snapshot()
		s.Set("new", "2", time.Minute)
		s.Del("old")
		time.Sleep(20 * time.Millisecond)
		id := s.runID
		s.RestartFrom(snap)
		assert.NotEqual(t, id, s.runID, "a restart from a snapshot keeps the run id")
		_, ok := s.Get("old")
		assert.True(t, ok, "the snapshot's key is lost")
		_, ok = s.Get("new")
		assert.False(t, ok, "a key written after the snapshot survived")
		_, ok = s.Get("brief")
		assert.False(t, ok, "a key of the snapshot that expired meanwhile came back")
	})
}

// Faults: a hung server answers nothing until resumed (then applies what
// was sent), a failed one refuses at once, a restart loses every key and
// tells subscriptions.
func TestFaultsVirtual(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New()
		c := s.Conn()
		ctx := context.Background()

		s.Hang()
		done := make(chan error, 1)
		go func() {
			_, err := c.SetNX(ctx, "k", "v", time.Minute)
			done <- err
		}()
		time.Sleep(time.Hour)
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("a hung server answered")
		default:
		}
		short, cancel := context.WithTimeout(ctx, time.Second)
		_, err := c.Eval(short, driver.NewScript("return 1"), nil)
		cancel()
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		s.Resume()
		require.NoError(t, <-done)
		_, held := s.Get("k")
		assert.True(t, held, "the call queued while hung was not applied")

		s.Fail(ErrDown)
		_, err = c.SetNX(ctx, "x", "v", time.Minute)
		assert.ErrorIs(t, err, ErrDown)
		assert.False(t, driver.Replied(err))
		s.Fail(nil)

		sub := c.(driver.Subscriber).Subscribe(ctx)
		defer sub.Close()
		require.NoError(t, sub.Subscribe(ctx, "ch"))
		n, err := c.Eval(ctx, driver.NewScript("return redis.call('PUBLISH', KEYS[1], 'hi')"), []string{"ch"})
		require.NoError(t, err)
		assert.Equal(t, int64(1), n)
		p, err := sub.Receive(ctx)
		require.NoError(t, err)
		assert.Equal(t, driver.Push{Channel: "ch", Payload: "hi"}, p)
		require.NoError(t, sub.Ping(ctx, "7"))
		p, err = sub.Receive(ctx)
		require.NoError(t, err)
		assert.Equal(t, driver.Push{Pong: true, Payload: "7"}, p)

		info1, err := c.(driver.Inspector).Info(ctx, "server")
		require.NoError(t, err)
		s.Restart()
		_, held = s.Get("k")
		assert.False(t, held, "a restart kept a key")
		_, err = sub.Receive(ctx)
		assert.Error(t, err, "the subscription did not see the restart")
		info2, err := c.(driver.Inspector).Info(ctx, "server")
		require.NoError(t, err)
		assert.NotEqual(t, runID(info1), runID(info2), "the run id did not change")
	})
}

func runID(info string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
			return v
		}
	}
	return fmt.Sprint("no run_id in ", info)
}

// TestEndedContextSendsNothing: a call whose context has ended does
// nothing and returns the context's error, as go-redis sends nothing then
// (driver.Conn's contract). The lock relies on it: an Extend whose context
// had ended prolonged nothing.
func TestEndedContextSendsNothing(t *testing.T) {
	s := New()
	c := s.Conn()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.SetNX(ctx, "k", "v", time.Minute)
	assert.ErrorIs(t, err, context.Canceled)
	_, err = c.Eval(ctx, driver.NewScript("return redis.call('SET', KEYS[1], 'v')"), []string{"k"})
	assert.ErrorIs(t, err, context.Canceled)
	_, ok := s.Get("k")
	assert.False(t, ok, "a call with an ended context wrote the key")
	set, err := c.SetNX(context.Background(), "k", "v", time.Minute)
	require.NoError(t, err)
	assert.True(t, set)
}

// TestDescribeHasNoDialAddress: a server in memory has a name for messages
// but no address: the lock dials the address of a master that does not
// answer, and a made-up host would be looked up in DNS.
func TestDescribeHasNoDialAddress(t *testing.T) {
	s := New()
	d := driver.Describe(s.Conn())
	assert.Empty(t, d.Addr, "an address the lock would dial")
	assert.Equal(t, s.Addr(), d.Label())
}
