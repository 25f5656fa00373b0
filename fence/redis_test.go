package fence

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/driver"
	"quorumlock.dev/fence/internal/mintertest"
	"quorumlock.dev/internal/harness/memredis"
	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"

	"quorumlock.dev/driver/goredis"
)

func newCounter(t *testing.T, opts ...CounterOption) (*miniredis.Miniredis, *RedisCounter) {
	t.Helper()
	srv := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = client.Close() })
	c, err := NewRedisCounter(goredis.Conn(client), opts...)
	require.NoError(t, err)
	return srv, c
}

// TestMintIncreases: a new resource starts at the node's clock in
// microseconds and then counts up by one.
func TestMintIncreases(t *testing.T) {
	for name, client := range backends(t) {
		t.Run(name, func(t *testing.T) {
			c, err := NewRedisCounter(goredis.Conn(client))
			require.NoError(t, err)
			before := nodeMicros(t, client)
			got := mintN(t, c, "alloc:WH-01", 5)
			after := nodeMicros(t, client)
			assert.GreaterOrEqual(t, got[0], before, "the first fence is the node's clock")
			assert.LessOrEqual(t, got[0], after)
			for i := 1; i < len(got); i++ {
				assert.Equal(t, got[i-1]+1, got[i], "gap-free within the key's life")
			}
			v, err := client.Get(t.Context(), "fence:alloc:WH-01").Result()
			require.NoError(t, err)
			assert.Equal(t, strconv.FormatUint(got[4], 10), v)

			other, err := c.Mint(t.Context(), "alloc:WH-02")
			require.NoError(t, err)
			assert.GreaterOrEqual(t, other, before, "each resource has its own counter, from the clock")
			next, err := c.Mint(t.Context(), "alloc:WH-02")
			require.NoError(t, err)
			assert.Equal(t, other+1, next)
		})
	}
}

// TestMintConcurrentUnique: concurrent mints never repeat a value and leave
// no gap when nothing fails.
func TestMintConcurrentUnique(t *testing.T) {
	_, c := newCounter(t)
	const workers, each = 8, 50
	seen := mintertest.Concurrent(t, c, "invoice:42", workers, each)
	first := slices.Min(slices.Collect(maps.Keys(seen)))
	for v := first; v < first+workers*each; v++ {
		assert.True(t, seen[v], "gap at %d", v)
	}
}

func TestNewRedisCounterRejects(t *testing.T) {
	var typedNil *redis.Client
	_, err := NewRedisCounter(nil)
	assert.ErrorIs(t, err, ErrInvalidArgument)
	_, err = NewRedisCounter(goredis.Conn(typedNil))
	assert.ErrorIs(t, err, ErrInvalidArgument)
	srv := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()
	_, err = NewRedisCounter(goredis.Conn(client), WithTimeout(0))
	assert.ErrorIs(t, err, ErrInvalidArgument)
}

// TestMintRefusesBadNames: the counter refuses the names the lock refuses
// (internal/names), before anything is sent, and its error quotes a prefix:
// a name with a newline was minted, and a 1 MiB name came back as a 1 MiB
// error.
func TestMintRefusesBadNames(t *testing.T) {
	srv, c := newCounter(t)
	ctx := context.Background()
	for _, bad := range []string{"a\nb", "nul\x00", "\xff", strings.Repeat("x", 1<<20)} {
		_, err := c.Mint(ctx, bad)
		if assert.ErrorIs(t, err, ErrInvalidArgument) {
			assert.Less(t, len(err.Error()), 200, "the error quotes the whole name")
		}
		assert.ErrorIs(t, c.Seed(ctx, bad, 5), ErrInvalidArgument)
	}
	assert.Empty(t, srv.Keys(), "a counter was made for a bad name")
}

func TestMintEmptyResource(t *testing.T) {
	srv, c := newCounter(t)
	ctx := context.Background()
	_, err := c.Mint(ctx, "")
	assert.ErrorIs(t, err, ErrInvalidArgument)
	assert.Empty(t, srv.Keys(), "nothing was sent")
}

func TestMintContext(t *testing.T) {
	_, c := newCounter(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.Mint(ctx, "a:1")
	assert.ErrorIs(t, err, context.Canceled)
}

func TestMintCounterDown(t *testing.T) {
	srv, c := newCounter(t)
	srv.Close()
	_, err := c.Mint(context.Background(), "a:1")
	require.Error(t, err)
}

// TestMintHungCounter: a counter node stopped with SIGSTOP costs at most the
// counter's timeout (or the context's deadline), although go-redis would
// wait 10 s.
func TestMintHungCounter(t *testing.T) {
	srv := redistest.Start(t, redisserver.Options{})
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, ReadTimeout: 10 * time.Second})
	t.Cleanup(func() { _ = client.Close() })
	c, err := NewRedisCounter(goredis.Conn(client), WithTimeout(100*time.Millisecond))
	require.NoError(t, err)
	v, err := c.Mint(context.Background(), "a:1")
	require.NoError(t, err)
	require.Positive(t, v)

	require.NoError(t, srv.Pause())
	t.Cleanup(func() { _ = srv.Resume() })
	start := time.Now()
	_, err = c.Mint(context.Background(), "a:1")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 2*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err = c.Mint(ctx, "a:1")
	assert.True(t, errors.Is(err, context.DeadlineExceeded))
	assert.Less(t, time.Since(start), 2*time.Second)
}

// TestMintHungCounterBounded: a counter node stopped with SIGSTOP and
// sixteen goroutines minting for a second, with a client of library
// defaults: the mints give up at the counter's timeout and what they leave
// behind is capped by the client's pool (calls stuck in reads until
// ReadTimeout), not by the number of mints.
func TestMintHungCounterBounded(t *testing.T) {
	srv := redistest.Start(t, redisserver.Options{})
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	c, err := NewRedisCounter(goredis.Conn(client), WithTimeout(50*time.Millisecond))
	require.NoError(t, err)
	_, err = c.Mint(context.Background(), "a:1")
	require.NoError(t, err)
	require.NoError(t, srv.Pause())
	t.Cleanup(func() { _ = srv.Resume() })

	before := runtime.NumGoroutine()
	var wg sync.WaitGroup
	var mints atomic.Int64
	end := time.Now().Add(time.Second)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				_, err := c.Mint(context.Background(), "a:1")
				assert.ErrorIs(t, err, context.DeadlineExceeded)
				mints.Add(1)
			}
		}()
	}
	wg.Wait()
	time.Sleep(500 * time.Millisecond)
	left := runtime.NumGoroutine() - before
	t.Logf("%d mints, %d goroutines left (pool %d)", mints.Load(), left, client.Options().PoolSize)
	assert.LessOrEqual(t, left, client.Options().PoolSize+8)
}

func TestKey(t *testing.T) {
	assert.Equal(t, "fence:alloc:WH-01", Key("alloc:WH-01"))
}

// backends returns a client of miniredis and one of a real redis-server, for
// tests whose scripts must behave the same on both.
func backends(t *testing.T) map[string]*redis.Client {
	t.Helper()
	mini := miniredis.RunT(t)
	real := redistest.Start(t, redisserver.Options{})
	return map[string]*redis.Client{
		"miniredis":    redistest.Client(t, mini.Addr()),
		"redis-server": redistest.Client(t, real.Addr()),
	}
}

func TestCheckDurability(t *testing.T) {
	t.Run("defaults", func(t *testing.T) {
		srv := redistest.Start(t, redisserver.Options{})
		client := redistest.Client(t, srv.Addr())
		c, err := NewRedisCounter(goredis.Conn(client))
		require.NoError(t, err)
		err = c.CheckDurability(t.Context())
		require.ErrorIs(t, err, ErrNotDurable)
		msg := err.Error()
		assert.Contains(t, msg, `appendonly is "no", want "yes"`)
		assert.Contains(t, msg, `appendfsync is "everysec", want "always"`)
		assert.NotContains(t, msg, "maxmemory-policy", "the default policy is noeviction")
		assert.NotContains(t, msg, "\n")

		require.NoError(t, client.ConfigSet(t.Context(), "maxmemory-policy", "allkeys-lru").Err())
		err = c.CheckDurability(t.Context())
		require.ErrorIs(t, err, ErrNotDurable)
		assert.Contains(t, err.Error(), `maxmemory-policy is "allkeys-lru", want "noeviction"`)
	})
	durableArgs := []string{"--appendonly", "yes", "--appendfsync", "always", "--maxmemory-policy", "noeviction"}
	t.Run("durable", func(t *testing.T) {
		srv := redistest.Start(t, redisserver.Options{Args: durableArgs})
		c, err := NewRedisCounter(goredis.Conn(redistest.Client(t, srv.Addr())))
		require.NoError(t, err)
		assert.NoError(t, c.CheckDurability(t.Context()))
	})
	t.Run("no-appendfsync-on-rewrite", func(t *testing.T) {
		srv := redistest.Start(t, redisserver.Options{Args: slices.Concat(durableArgs, []string{"--no-appendfsync-on-rewrite", "yes"})})
		c, err := NewRedisCounter(goredis.Conn(redistest.Client(t, srv.Addr())))
		require.NoError(t, err)
		err = c.CheckDurability(t.Context())
		require.ErrorIs(t, err, ErrNotDurable)
		assert.Contains(t, err.Error(), `no-appendfsync-on-rewrite is "yes", want "no"`)
	})
	t.Run("replica", func(t *testing.T) {
		primary := redistest.Start(t, redisserver.Options{Args: durableArgs})
		replica := redistest.Start(t, redisserver.Options{Args: slices.Concat(durableArgs, []string{
			"--replicaof", "127.0.0.1", strconv.Itoa(primary.Port())})})
		c, err := NewRedisCounter(goredis.Conn(redistest.Client(t, replica.Addr())))
		require.NoError(t, err)
		err = c.CheckDurability(t.Context())
		require.ErrorIs(t, err, ErrNotDurable)
		assert.Contains(t, err.Error(), `role is "slave", want "master"`)
		assert.NotContains(t, err.Error(), "appendonly", "only the role is wrong")
		assert.NotContains(t, err.Error(), "\n")

		onPrimary, err := NewRedisCounter(goredis.Conn(redistest.Client(t, primary.Addr())))
		require.NoError(t, err)
		assert.NoError(t, onPrimary.CheckDurability(t.Context()), "a primary with replicas is durable")
	})
	t.Run("no CONFIG", func(t *testing.T) {
		_, c := newCounter(t) // miniredis has no CONFIG command
		err := c.CheckDurability(t.Context())
		require.ErrorIs(t, err, ErrNotDurable)
		assert.Contains(t, err.Error(), "could not be read")
	})
}

// TestSeedAndDurabilityBounded: CheckDurability and Seed on a hung node cost
// at most the counter's timeout, as Mint does.
func TestSeedAndDurabilityBounded(t *testing.T) {
	srv := redistest.Start(t, redisserver.Options{})
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, ReadTimeout: 10 * time.Second})
	t.Cleanup(func() { _ = client.Close() })
	c, err := NewRedisCounter(goredis.Conn(client), WithTimeout(100*time.Millisecond))
	require.NoError(t, err)
	require.NoError(t, srv.Pause())
	t.Cleanup(func() { _ = srv.Resume() })

	start := time.Now()
	err = c.CheckDurability(t.Context())
	assert.ErrorIs(t, err, ErrNotDurable)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 2*time.Second)

	start = time.Now()
	err = c.Seed(t.Context(), "a:1", 10)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 2*time.Second)
}

// TestMintRegressed: a key written lower by hand is reported, and the
// resource stays refused (without a call to the node) until Seed; other
// resources are not affected.
func TestMintRegressed(t *testing.T) {
	srv, c := newCounter(t)
	ctx := t.Context()
	minted := mintN(t, c, "a:1", 3)
	b := mintN(t, c, "b:1", 1)[0]

	require.NoError(t, srv.Set("fence:a:1", "1")) // reset by hand
	v, err := c.Mint(ctx, "a:1")
	require.ErrorIs(t, err, ErrCounterRegressed)
	assert.Zero(t, v)
	assert.Contains(t, err.Error(), fmt.Sprintf("gave 2, after this process had minted %d", minted[2]))
	for range 3 {
		v, err = c.Mint(ctx, "a:1")
		require.ErrorIs(t, err, ErrCounterRegressed, "refused until Seed")
		assert.Zero(t, v)
	}
	stored, err := srv.Get("fence:a:1")
	require.NoError(t, err)
	assert.Equal(t, "2", stored, "a refused mint does not move the counter")

	v, err = c.Mint(ctx, "b:1")
	require.NoError(t, err, "other resources are not affected")
	assert.Equal(t, b+1, v)

	require.NoError(t, c.Seed(ctx, "a:1", 0))
	v, err = c.Mint(ctx, "a:1")
	require.NoError(t, err)
	assert.Equal(t, minted[2]+1, v, "Seed never seeds below what this counter minted")
}

// TestMintSharedCounter: other processes minting on the same counter only
// move it forward, which is no regression.
func TestMintSharedCounter(t *testing.T) {
	srv := miniredis.RunT(t)
	client := redistest.Client(t, srv.Addr())
	a, err := NewRedisCounter(goredis.Conn(client))
	require.NoError(t, err)
	b, err := NewRedisCounter(goredis.Conn(client))
	require.NoError(t, err)
	ctx := t.Context()
	var last uint64
	for i := range 20 {
		m := a
		if i%3 == 0 {
			m = b
		}
		v, err := m.Mint(ctx, "a:1")
		require.NoError(t, err)
		require.Greater(t, v, last)
		last = v
	}
}

// TestMintMarkAllocs: remembering the largest value minted allocates only
// the first time a resource is seen.
func TestMintMarkAllocs(t *testing.T) {
	_, c := newCounter(t)
	c.mark("alloc:WH-01")
	allocs := testing.AllocsPerRun(1000, func() {
		m := c.mark("alloc:WH-01")
		floor := m.minted.Load()
		if !m.regressed.Load() {
			m.minted.CompareAndSwap(floor, floor+1)
		}
	})
	assert.Zero(t, allocs)
}

func TestSeed(t *testing.T) {
	const big = 1 << 53 // doubles cannot tell big from big+1
	cases := []struct {
		name    string
		stored  string // "" for no key
		atLeast uint64
		want    string // "clock" for the node's clock in microseconds
	}{
		{"missing", "", 7, "clock"},
		{"missing, above the clock", "", 1 << 62, "4611686018427387904"},
		{"raises", "3", 10, "10"},
		{"raises across a digit", "9", 10, "10"},
		{"never lowers", "10", 9, "10"},
		{"equal", "10", 10, "10"},
		{"negative", "-4", 2, "2"},
		{"exact above 2^53", "9007199254740992", big + 1, "9007199254740993"},
		{"max", "1", math.MaxInt64, "9223372036854775807"},
	}
	for name, client := range backends(t) {
		t.Run(name, func(t *testing.T) {
			c, err := NewRedisCounter(goredis.Conn(client))
			require.NoError(t, err)
			ctx := t.Context()
			for _, tc := range cases {
				resource := "seed:" + tc.name
				if tc.stored != "" {
					require.NoError(t, client.Set(ctx, Key(resource), tc.stored, 0).Err())
				}
				before := nodeMicros(t, client)
				require.NoError(t, c.Seed(ctx, resource, tc.atLeast), tc.name)
				got, err := client.Get(ctx, Key(resource)).Result()
				require.NoError(t, err)
				if tc.want != "clock" {
					assert.Equal(t, tc.want, got, tc.name)
					continue
				}
				n, err := strconv.ParseUint(got, 10, 64)
				require.NoError(t, err, tc.name)
				assert.GreaterOrEqual(t, n, before, "%s: a missing key gets at least the floor a mint would", tc.name)
				assert.LessOrEqual(t, n, nodeMicros(t, client), tc.name)
			}

			require.NoError(t, client.Set(ctx, Key("seed:text"), "abc", 0).Err())
			err = c.Seed(ctx, "seed:text", 5)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "holds no integer")
			require.NoError(t, client.HSet(ctx, Key("seed:hash"), "f", "v").Err())
			err = c.Seed(ctx, "seed:hash", 5)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "WRONGTYPE")
		})
	}
}

// TestMintExactAbove2to53: two counters on one node (two processes,
// each remembering only its own fences) seeded at 2^53+1 mint +2, +3, +4,
// each once, and the node holds each value minted. A Lua number is a
// double: the script used to return INCR's result through one, and mints
// by two processes returned +2, +4, +4, one fence to two successive locks.
func TestMintExactAbove2to53(t *testing.T) {
	const floor = 1<<53 + 1
	nodes := map[string]driver.Conn{"memredis": memredis.New().Conn()}
	for name, client := range backends(t) {
		nodes[name] = goredis.Conn(client)
	}
	for name, node := range nodes {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			a, err := NewRedisCounter(node)
			require.NoError(t, err)
			b, err := NewRedisCounter(node)
			require.NoError(t, err)
			require.NoError(t, a.Seed(ctx, "big", floor))
			var got []uint64
			for _, c := range []*RedisCounter{a, b, a, b} {
				v, err := c.Mint(ctx, "big")
				require.NoError(t, err)
				got = append(got, v)
			}
			assert.Equal(t, []uint64{floor + 1, floor + 2, floor + 3, floor + 4}, got)
			stored, err := node.Eval(ctx, driver.NewScript("return redis.call('GET', KEYS[1])"), []string{Key("big")})
			require.NoError(t, err)
			assert.Equal(t, strconv.FormatUint(floor+4, 10), stored)
		})
	}
}

// TestCounterForgetsIdleResources: the counter remembers what it minted
// for the resources used in the last ForgetAfter, not every resource it
// ever saw; one whose counter went backwards stays refused until Seed.
func TestCounterForgetsIdleResources(t *testing.T) {
	srv, c := newCounter(t)
	srv.SetTime(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)) // stopped: a lost key's floor is not above its fences
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	c.now = func() time.Time { return now }
	ctx := t.Context()
	var first uint64
	for i := range 1000 {
		v := mintN(t, c, fmt.Sprintf("order:%d", i), 1)[0]
		if i == 1 {
			first = v
		}
	}
	mintN(t, c, "bad", 3)
	srv.Del(Key("bad"))
	_, err := c.Mint(ctx, "bad")
	require.ErrorIs(t, err, ErrCounterRegressed)
	require.Equal(t, 1001, c.remembered())

	now = now.Add(ForgetAfter - time.Minute)
	mintN(t, c, "order:7", 1) // used again: kept
	now = now.Add(2 * time.Minute)
	mintN(t, c, "new", 1)
	assert.Equal(t, 3, c.remembered(), "idle resources were not forgotten (order:7, new and the regressed one stay)")
	_, err = c.Mint(ctx, "bad")
	assert.ErrorIs(t, err, ErrCounterRegressed, "a regressed resource was forgotten, and its refusal with it")

	// Forgotten, a resource is minted as a new one: the node's count goes on.
	v, err := c.Mint(ctx, "order:1")
	require.NoError(t, err)
	assert.Equal(t, first+1, v, "the count did not go on")
}

// TestCounterNodeRestartedEmpty: a counter node with no persistence at all
// (redis-server with appendonly no and no snapshots) restarted loses every
// counter; the next mints, by this process and by one that never minted
// before, start from the node's clock, above every fence handed out.
func TestCounterNodeRestartedEmpty(t *testing.T) {
	srv := redistest.Start(t, redisserver.Options{Args: []string{"--appendonly", "no", "--save", ""}})
	client := redistest.Client(t, srv.Addr())
	c, err := NewRedisCounter(goredis.Conn(client))
	require.NoError(t, err)
	ctx := t.Context()
	before := mintN(t, c, "job", 5)
	require.NoError(t, srv.Kill())
	require.NoError(t, srv.Restart(ctx))
	n, err := client.Exists(ctx, Key("job")).Result()
	require.NoError(t, err)
	require.Zero(t, n, "the node kept the counter: not a restart without persistence")
	after, err := c.Mint(ctx, "job")
	require.NoError(t, err, "this process refused the counter after the restart")
	assert.Greater(t, after, before[4], "a fence repeated after the node restarted empty")
	other, err := NewRedisCounter(goredis.Conn(client))
	require.NoError(t, err)
	v, err := other.Mint(ctx, "job")
	require.NoError(t, err)
	assert.Greater(t, v, after)
}

// TestLast: the counter read without minting: nothing before the first
// mint, the last fence after it, and a typed error for a key that holds no
// counter.
func TestLast(t *testing.T) {
	srv, c := newCounter(t)
	ctx := t.Context()
	_, ok, err := c.Last(ctx, "a:1")
	require.NoError(t, err)
	assert.False(t, ok)
	minted := mintN(t, c, "a:1", 3)
	v, ok, err := c.Last(ctx, "a:1")
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, minted[2], v)
	assert.Equal(t, minted[2]+1, mintN(t, c, "a:1", 1)[0], "Last minted")
	require.NoError(t, srv.Set(Key("b:1"), "text"))
	_, _, err = c.Last(ctx, "b:1")
	assert.ErrorIs(t, err, ErrCounter)
	_, _, err = c.Last(ctx, "")
	assert.ErrorIs(t, err, ErrInvalidArgument)
}

// TestSeedAboveMinted: a seed below what this process minted would hand the
// same fences out again, so the minted value wins.
func TestSeedAboveMinted(t *testing.T) {
	srv, c := newCounter(t)
	srv.SetTime(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)) // stopped: the floor is not above the fences minted
	ctx := t.Context()
	minted := mintN(t, c, "a:1", 5)
	srv.FlushAll()
	require.NoError(t, c.Seed(ctx, "a:1", 2))
	v, err := c.Mint(ctx, "a:1")
	require.NoError(t, err)
	assert.Equal(t, minted[4]+1, v)
}

func TestSeedRejects(t *testing.T) {
	srv, c := newCounter(t)
	ctx := t.Context()
	assert.ErrorIs(t, c.Seed(ctx, "", 1), ErrInvalidArgument)
	assert.ErrorIs(t, c.Seed(ctx, "a:1", math.MaxInt64+1), ErrInvalidArgument)
	assert.Empty(t, srv.Keys(), "nothing was sent")
}

var mintSink uint64

// BenchmarkMint runs on a real redis-server: miniredis runs the script
// in-process, and its Lua allocations would hide the client's.
func BenchmarkMint(b *testing.B) {
	srv := redistest.Start(b, redisserver.Options{})
	client := redistest.Client(b, srv.Addr())
	c, err := NewRedisCounter(goredis.Conn(client))
	require.NoError(b, err)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		v, err := c.Mint(ctx, "alloc:WH-01")
		if err != nil {
			b.Fatal(err)
		}
		mintSink = v
	}
}

// nodeMicros is the counter node's clock, TIME, in microseconds.
func nodeMicros(t *testing.T, client *redis.Client) uint64 {
	t.Helper()
	now, err := client.Time(t.Context()).Result()
	require.NoError(t, err)
	return uint64(now.UnixMicro())
}

// mintN mints n fences for resource and returns them.
func mintN(t *testing.T, c *RedisCounter, resource string, n int) []uint64 {
	t.Helper()
	out := make([]uint64, n)
	for i := range out {
		v, err := c.Mint(t.Context(), resource)
		require.NoError(t, err)
		out[i] = v
	}
	return out
}

// TestMintTwoProcessesAfterLoss: two counters on one node stand for two
// processes. B mints four fences, A one, and the node loses its data; then
// neither ever receives a fence at or below one issued before the loss, and
// no fence is handed out twice.
func TestMintTwoProcessesAfterLoss(t *testing.T) {
	for _, loss := range []string{"FLUSHALL", "restart without persistence"} {
		t.Run(loss, func(t *testing.T) {
			srv := redistest.Start(t, redisserver.Options{Args: []string{"--appendonly", "no", "--save", ""}})
			client := redistest.Client(t, srv.Addr())
			a, err := NewRedisCounter(goredis.Conn(client))
			require.NoError(t, err)
			b, err := NewRedisCounter(goredis.Conn(client))
			require.NoError(t, err)
			const resource = "alloc:WH-01"
			issued := append(mintN(t, b, resource, 4), mintN(t, a, resource, 1)...)
			last := issued[len(issued)-1]

			if loss == "FLUSHALL" {
				require.NoError(t, client.FlushAll(t.Context()).Err())
			} else {
				require.NoError(t, srv.Kill())
				require.NoError(t, srv.Restart(t.Context()))
				n, err := client.Exists(t.Context(), Key(resource)).Result()
				require.NoError(t, err)
				require.Zero(t, n, "the restart must have lost the counter")
			}

			seen := map[uint64]bool{}
			for _, v := range issued {
				seen[v] = true
			}
			for i := range 10 {
				m := b
				if i%2 == 1 {
					m = a
				}
				v, err := m.Mint(t.Context(), resource)
				require.NoError(t, err, "mint %d after the loss", i)
				assert.Greater(t, v, last, "mint %d after the loss reissued or went back", i)
				assert.False(t, seen[v], "fence %d handed out twice", v)
				seen[v] = true
			}
		})
	}
}

// TestMintNotACounter: a counter key that holds something else than a
// positive integer gives ErrCounter, and the key is left as it was.
func TestMintNotACounter(t *testing.T) {
	for name, client := range backends(t) {
		t.Run(name, func(t *testing.T) {
			c, err := NewRedisCounter(goredis.Conn(client))
			require.NoError(t, err)
			ctx := t.Context()
			for _, stored := range []string{"abc", "-5", "1.5", "99999999999999999999"} {
				resource := "bad:" + stored
				require.NoError(t, client.Set(ctx, Key(resource), stored, 0).Err())
				v, err := c.Mint(ctx, resource)
				require.ErrorIs(t, err, ErrCounter, stored)
				assert.Zero(t, v)
				got, err := client.Get(ctx, Key(resource)).Result()
				require.NoError(t, err)
				assert.Equal(t, stored, got, "the key is left as it was")
			}
			require.NoError(t, client.HSet(ctx, Key("bad:hash"), "f", "v").Err())
			_, err = c.Mint(ctx, "bad:hash")
			require.ErrorIs(t, err, ErrCounter)
			assert.Contains(t, err.Error(), "WRONGTYPE")
		})
	}
}

func TestNewRedisCounterRefusesRing(t *testing.T) {
	srv := miniredis.RunT(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr()}})
	t.Cleanup(func() { _ = ring.Close() })
	c, err := NewRedisCounter(goredis.Conn(ring))
	require.ErrorIs(t, err, ErrInvalidArgument)
	assert.Nil(t, c)
	assert.Contains(t, err.Error(), "Ring")
}

// TestMintRegressedNeverReissues breaks the floor's precondition on
// purpose: the node loses the key and its clock goes back, so the new floor
// is below fences issued before. The counters that had minted see it and
// refuse the resource from then on, without moving the node, however far
// others move it, until Seed raises it. A counter that had minted nothing
// cannot see it and reissues fences: the limit docs/fencing.md states.
func TestMintRegressedNeverReissues(t *testing.T) {
	srv := miniredis.RunT(t)
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	srv.SetTime(start)
	client := redistest.Client(t, srv.Addr())
	a, err := NewRedisCounter(goredis.Conn(client))
	require.NoError(t, err)
	b, err := NewRedisCounter(goredis.Conn(client))
	require.NoError(t, err)
	ctx := t.Context()
	const resource = "alloc:WH-01"
	issued := append(mintN(t, b, resource, 4), mintN(t, a, resource, 1)...)
	last := issued[len(issued)-1]

	srv.FlushAll()
	srv.SetTime(start.Add(-2 * time.Microsecond))
	for i := range 10 {
		v, err := b.Mint(ctx, resource)
		require.ErrorIs(t, err, ErrCounterRegressed, "mint %d by B", i)
		assert.Zero(t, v)
	}
	stored, err := srv.Get(Key(resource))
	require.NoError(t, err)
	assert.Equal(t, strconv.FormatInt(start.UnixMicro()-2, 10), stored, "B's refusals did not move the counter")
	_, err = a.Mint(ctx, resource)
	require.ErrorIs(t, err, ErrCounterRegressed)

	fresh, err := NewRedisCounter(goredis.Conn(client))
	require.NoError(t, err)
	assert.Equal(t, issued, mintN(t, fresh, resource, len(issued)), "a process that had minted nothing reissues fences")
	mintN(t, fresh, resource, 10) // the node is past every fence issued now

	for _, m := range []*RedisCounter{a, b} {
		v, err := m.Mint(ctx, resource)
		require.ErrorIs(t, err, ErrCounterRegressed, "still refused once the node is past this counter's fences")
		assert.Zero(t, v)
	}
	above := last + 1_000_000
	require.NoError(t, b.Seed(ctx, resource, above))
	v, err := b.Mint(ctx, resource)
	require.NoError(t, err)
	assert.Greater(t, v, above, "Seed repairs the counter that calls it")
	_, err = a.Mint(ctx, resource)
	require.ErrorIs(t, err, ErrCounterRegressed, "and only that one")
	require.NoError(t, a.Seed(ctx, resource, above))
	w, err := a.Mint(ctx, resource)
	require.NoError(t, err)
	assert.Greater(t, w, v)
}
