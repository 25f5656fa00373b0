package fence

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/internal/redisserver"
	"quorumlock.dev/internal/redistest"
)

func newCounter(t *testing.T, opts ...CounterOption) (*miniredis.Miniredis, *RedisCounter) {
	t.Helper()
	srv := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = client.Close() })
	c, err := NewRedisCounter(client, opts...)
	require.NoError(t, err)
	return srv, c
}

func TestMintIncreases(t *testing.T) {
	srv, c := newCounter(t)
	ctx := context.Background()
	for want := uint64(1); want <= 5; want++ {
		got, err := c.Mint(ctx, "alloc:WH-01")
		require.NoError(t, err)
		assert.Equal(t, want, got)
	}
	v, err := srv.Get("fence:alloc:WH-01")
	require.NoError(t, err)
	assert.Equal(t, "5", v)
	other, err := c.Mint(ctx, "alloc:WH-02")
	require.NoError(t, err)
	assert.Equal(t, uint64(1), other, "each resource has its own counter")
}

// TestMintConcurrentUnique: concurrent mints never repeat a value and leave
// no gap when nothing fails.
func TestMintConcurrentUnique(t *testing.T) {
	_, c := newCounter(t)
	const workers, each = 8, 50
	var mu sync.Mutex
	seen := map[uint64]bool{}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				v, err := c.Mint(context.Background(), "invoice:42")
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				assert.False(t, seen[v], "fence %d minted twice", v)
				seen[v] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Len(t, seen, workers*each)
	for v := uint64(1); v <= workers*each; v++ {
		assert.True(t, seen[v], "gap at %d", v)
	}
}

func TestNewRedisCounterRejects(t *testing.T) {
	var typedNil *redis.Client
	_, err := NewRedisCounter(nil)
	assert.ErrorIs(t, err, ErrInvalidArgument)
	_, err = NewRedisCounter(typedNil)
	assert.ErrorIs(t, err, ErrInvalidArgument)
	srv := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()
	_, err = NewRedisCounter(client, WithTimeout(0))
	assert.ErrorIs(t, err, ErrInvalidArgument)
}

func TestMintBadInput(t *testing.T) {
	srv, c := newCounter(t)
	ctx := context.Background()
	_, err := c.Mint(ctx, "")
	assert.ErrorIs(t, err, ErrInvalidArgument)

	srv.HSet("fence:wrong", "f", "v")
	_, err = c.Mint(ctx, "wrong")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "WRONGTYPE")

	require.NoError(t, srv.Set("fence:negative", "-5"))
	_, err = c.Mint(ctx, "negative")
	assert.ErrorIs(t, err, ErrCounter)

	require.NoError(t, srv.Set("fence:text", "abc"))
	_, err = c.Mint(ctx, "text")
	require.Error(t, err)
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
	c, err := NewRedisCounter(client, WithTimeout(100*time.Millisecond))
	require.NoError(t, err)
	v, err := c.Mint(context.Background(), "a:1")
	require.NoError(t, err)
	require.Equal(t, uint64(1), v)

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

func TestKey(t *testing.T) {
	assert.Equal(t, "fence:alloc:WH-01", Key("alloc:WH-01"))
}

// incrOnly is a counter node that can count and nothing else, like a client
// wrapper that exposes only what Incrementer asks for.
type incrOnly struct{ Incrementer }

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
		c, err := NewRedisCounter(client)
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
	t.Run("durable", func(t *testing.T) {
		srv := redistest.Start(t, redisserver.Options{Args: []string{
			"--appendonly", "yes", "--appendfsync", "always", "--maxmemory-policy", "noeviction",
		}})
		c, err := NewRedisCounter(redistest.Client(t, srv.Addr()))
		require.NoError(t, err)
		assert.NoError(t, c.CheckDurability(t.Context()))
	})
	t.Run("no CONFIG", func(t *testing.T) {
		_, c := newCounter(t) // miniredis has no CONFIG command
		err := c.CheckDurability(t.Context())
		require.ErrorIs(t, err, ErrNotDurable)
		assert.Contains(t, err.Error(), "could not be read")
	})
	t.Run("client without ConfigGet", func(t *testing.T) {
		srv := miniredis.RunT(t)
		c, err := NewRedisCounter(incrOnly{redistest.Client(t, srv.Addr())})
		require.NoError(t, err)
		err = c.CheckDurability(t.Context())
		require.ErrorIs(t, err, ErrNotDurable)
		assert.Contains(t, err.Error(), "could not be read")
		assert.Contains(t, err.Error(), "ConfigGet")
	})
}

// TestSeedAndDurabilityBounded: CheckDurability and Seed on a hung node cost
// at most the counter's timeout, as Mint does.
func TestSeedAndDurabilityBounded(t *testing.T) {
	srv := redistest.Start(t, redisserver.Options{})
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, ReadTimeout: 10 * time.Second})
	t.Cleanup(func() { _ = client.Close() })
	c, err := NewRedisCounter(client, WithTimeout(100*time.Millisecond))
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

// TestMintRegressedAfterRestart: a counter node without persistence restarts
// empty; the next Mint reports it instead of minting 1 again, and seeding the
// counter repairs it.
func TestMintRegressedAfterRestart(t *testing.T) {
	srv := redistest.Start(t, redisserver.Options{Args: []string{"--appendonly", "no"}})
	c, err := NewRedisCounter(redistest.Client(t, srv.Addr()))
	require.NoError(t, err)
	ctx := t.Context()
	const resource = "alloc:WH-01"
	for want := uint64(1); want <= 3; want++ {
		got, err := c.Mint(ctx, resource)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}

	require.NoError(t, srv.Kill())
	require.NoError(t, srv.Restart(ctx))

	v, err := c.Mint(ctx, resource)
	require.ErrorIs(t, err, ErrCounterRegressed)
	assert.Zero(t, v, "the repeated fence is not handed out")
	assert.Contains(t, err.Error(), "minted 3")

	require.NoError(t, c.Seed(ctx, resource, 3))
	v, err = c.Mint(ctx, resource)
	require.NoError(t, err)
	assert.Equal(t, uint64(4), v)
}

func TestMintRegressed(t *testing.T) {
	srv, c := newCounter(t)
	ctx := t.Context()
	for range 3 {
		_, err := c.Mint(ctx, "a:1")
		require.NoError(t, err)
	}
	_, err := c.Mint(ctx, "b:1")
	require.NoError(t, err)

	require.NoError(t, srv.Set("fence:a:1", "1")) // reset by hand
	v, err := c.Mint(ctx, "a:1")
	require.ErrorIs(t, err, ErrCounterRegressed)
	assert.Zero(t, v)
	assert.Contains(t, err.Error(), "gave 2, after this process had minted 3")
	_, err = c.Mint(ctx, "a:1")
	require.ErrorIs(t, err, ErrCounterRegressed, "3 was handed out already")
	v, err = c.Mint(ctx, "a:1")
	require.NoError(t, err)
	assert.Equal(t, uint64(4), v)

	v, err = c.Mint(ctx, "b:1")
	require.NoError(t, err, "other resources are not affected")
	assert.Equal(t, uint64(2), v)
}

// TestMintSharedCounter: other processes minting on the same counter only
// move it forward, which is no regression.
func TestMintSharedCounter(t *testing.T) {
	srv := miniredis.RunT(t)
	client := redistest.Client(t, srv.Addr())
	a, err := NewRedisCounter(client)
	require.NoError(t, err)
	b, err := NewRedisCounter(client)
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
		floor := m.Load()
		m.CompareAndSwap(floor, floor+1)
	})
	assert.Zero(t, allocs)
}

func TestSeed(t *testing.T) {
	const big = 1 << 53 // doubles cannot tell big from big+1
	cases := []struct {
		name    string
		stored  string // "" for no key
		atLeast uint64
		want    string
	}{
		{"missing", "", 7, "7"},
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
			c, err := NewRedisCounter(client)
			require.NoError(t, err)
			ctx := t.Context()
			for _, tc := range cases {
				resource := "seed:" + tc.name
				if tc.stored != "" {
					require.NoError(t, client.Set(ctx, Key(resource), tc.stored, 0).Err())
				}
				require.NoError(t, c.Seed(ctx, resource, tc.atLeast), tc.name)
				got, err := client.Get(ctx, Key(resource)).Result()
				require.NoError(t, err)
				assert.Equal(t, tc.want, got, tc.name)
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

// TestSeedAboveMinted: a seed below what this process minted would hand the
// same fences out again, so the minted value wins.
func TestSeedAboveMinted(t *testing.T) {
	srv, c := newCounter(t)
	ctx := t.Context()
	for range 5 {
		_, err := c.Mint(ctx, "a:1")
		require.NoError(t, err)
	}
	srv.FlushAll()
	require.NoError(t, c.Seed(ctx, "a:1", 2))
	v, err := c.Mint(ctx, "a:1")
	require.NoError(t, err)
	assert.Equal(t, uint64(6), v)
}

func TestSeedRejects(t *testing.T) {
	srv, c := newCounter(t)
	ctx := t.Context()
	assert.ErrorIs(t, c.Seed(ctx, "", 1), ErrInvalidArgument)
	assert.ErrorIs(t, c.Seed(ctx, "a:1", math.MaxInt64+1), ErrInvalidArgument)

	noScripts, err := NewRedisCounter(incrOnly{redistest.Client(t, srv.Addr())})
	require.NoError(t, err)
	err = noScripts.Seed(ctx, "a:1", 1)
	require.ErrorIs(t, err, ErrInvalidArgument)
	assert.Contains(t, err.Error(), "redis.Scripter")
}

var mintSink uint64

func BenchmarkMint(b *testing.B) {
	srv := miniredis.RunT(b)
	client := redistest.Client(b, srv.Addr())
	c, err := NewRedisCounter(client)
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
