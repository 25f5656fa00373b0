package fence

import (
	"context"
	"errors"
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
