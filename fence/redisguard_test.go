package fence

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/driver/goredis"
)

// TestRedisGuardSet runs the fenced write on miniredis and on a real server,
// since the script's comparison and TTL handling must agree on both. It is
// not parallel: it counts Rejected, which every guard in the process shares.
func TestRedisGuardSet(t *testing.T) {
	for name, client := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			var told atomic.Int64
			g := RedisGuard{OnReject: func() { told.Add(1) }}
			key := "guard:set"
			require.NoError(t, g.Set(ctx, goredis.Conn(client), key, "from 41", 41, 0))
			require.NoError(t, g.Set(ctx, goredis.Conn(client), key, "from 42", 42, 0))
			assert.Zero(t, told.Load(), "OnReject on an admitted write")

			before := Rejected()
			err := g.Set(ctx, goredis.Conn(client), key, "stale 41", 41, 0)
			require.ErrorIs(t, err, ErrFenceRejected)
			assert.Equal(t, before+1, Rejected(), "one refusal, counted once")
			assert.Equal(t, int64(1), told.Load(), "one refusal, told to OnReject once")
			assert.Contains(t, err.Error(), "holds fence 42, offered 41")

			v, f, err := g.Get(ctx, goredis.Conn(client), key)
			require.NoError(t, err)
			assert.Equal(t, "from 42", v, "a refused write leaves the value")
			assert.Equal(t, uint64(42), f)

			fields, err := client.HGetAll(ctx, key).Result()
			require.NoError(t, err)
			assert.Equal(t, map[string]string{"v": "from 42", "f": "42"}, fields, "the documented layout")
		})
	}
}

func TestRedisGuardComparison(t *testing.T) {
	const big = 1 << 53 // doubles cannot tell big from big+1
	cases := []struct {
		compare       Comparison
		stored, fence uint64
		admitted      bool
	}{
		{AtLeast, 7, 7, true},
		{AtLeast, 7, 8, true},
		{AtLeast, 7, 6, false},
		{Newer, 7, 7, false},
		{Newer, 7, 8, true},
		{Newer, 7, 6, false},
		{AtLeast, 9, 10, true},
		{AtLeast, 10, 9, false},
		{AtLeast, big + 1, big, false},
		{Newer, big, big + 1, true},
		{AtLeast, 1, 1<<64 - 1, true},
	}
	for name, client := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			for i, tc := range cases {
				g := RedisGuard{Compare: tc.compare}
				key := fmt.Sprintf("guard:compare:%d", i)
				require.NoError(t, g.Set(ctx, goredis.Conn(client), key, "old", tc.stored, 0))
				err := g.Set(ctx, goredis.Conn(client), key, "new", tc.fence, 0)
				v, f, gerr := g.Get(ctx, goredis.Conn(client), key)
				require.NoError(t, gerr)
				if tc.admitted {
					assert.NoError(t, err, "case %d", i)
					assert.Equal(t, "new", v, "case %d", i)
					assert.Equal(t, tc.fence, f, "case %d", i)
				} else {
					assert.ErrorIs(t, err, ErrFenceRejected, "case %d", i)
					assert.Equal(t, "old", v, "case %d", i)
					assert.Equal(t, tc.stored, f, "case %d", i)
				}
			}
		})
	}
}

func TestRedisGuardTTL(t *testing.T) {
	for name, client := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			var g RedisGuard
			key := "guard:ttl"
			require.NoError(t, g.Set(ctx, goredis.Conn(client), key, "a", 1, 10*time.Second))
			ttl, err := client.PTTL(ctx, key).Result()
			require.NoError(t, err)
			assert.Greater(t, ttl, 9*time.Second)
			assert.LessOrEqual(t, ttl, 10*time.Second)

			require.NoError(t, g.Set(ctx, goredis.Conn(client), key, "b", 2, 0))
			ttl, err = client.PTTL(ctx, key).Result()
			require.NoError(t, err)
			assert.Equal(t, time.Duration(-1), ttl, "ttl 0 removes an earlier expiry")
		})
	}
}

// TestRedisGuardExpiryForgetsFence shows why a ttl must outlast stale
// holders: once the key expires, its fence is gone and an old writer is
// admitted.
func TestRedisGuardExpiryForgetsFence(t *testing.T) {
	srv := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	ctx := t.Context()
	var g RedisGuard
	require.NoError(t, g.Set(ctx, goredis.Conn(client), "guard:exp", "new", 42, time.Second))
	srv.FastForward(2 * time.Second)
	v, f, err := g.Get(ctx, goredis.Conn(client), "guard:exp")
	require.NoError(t, err)
	assert.Equal(t, "", v)
	assert.Zero(t, f)
	assert.NoError(t, g.Set(ctx, goredis.Conn(client), "guard:exp", "stale", 41, 0))
}

func TestRedisGuardForeignKeys(t *testing.T) {
	for name, client := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			var g RedisGuard
			require.NoError(t, client.Set(ctx, "guard:string", "plain", 0).Err())
			err := g.Set(ctx, goredis.Conn(client), "guard:string", "v", 1, 0)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "WRONGTYPE")
			assert.NotErrorIs(t, err, ErrFenceRejected)
			_, _, err = g.Get(ctx, goredis.Conn(client), "guard:string")
			require.Error(t, err)
			assert.Contains(t, err.Error(), "WRONGTYPE")

			require.NoError(t, client.HSet(ctx, "guard:hash", "name", "x").Err())
			err = g.Set(ctx, goredis.Conn(client), "guard:hash", "v", 1, 0)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "without a fence")
			_, _, err = g.Get(ctx, goredis.Conn(client), "guard:hash")
			assert.ErrorContains(t, err, "not a guarded value")

			require.NoError(t, client.HSet(ctx, "guard:badfence", "v", "x", "f", "soon").Err())
			err = g.Set(ctx, goredis.Conn(client), "guard:badfence", "v", 1, 0)
			assert.ErrorContains(t, err, "no valid fence")
			_, _, err = g.Get(ctx, goredis.Conn(client), "guard:badfence")
			assert.ErrorContains(t, err, "not a positive integer")
		})
	}
}

func TestRedisGuardGetMissing(t *testing.T) {
	srv := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	var g RedisGuard
	v, f, err := g.Get(t.Context(), goredis.Conn(client), "guard:none")
	require.NoError(t, err)
	assert.Equal(t, "", v)
	assert.Zero(t, f)

	require.NoError(t, g.Set(t.Context(), goredis.Conn(client), "guard:empty", "", 3, 0))
	v, f, err = g.Get(t.Context(), goredis.Conn(client), "guard:empty")
	require.NoError(t, err)
	assert.Equal(t, "", v)
	assert.Equal(t, uint64(3), f, "an empty value is told apart by its fence")
}

func TestRedisGuardRejectsArguments(t *testing.T) {
	srv := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	ctx := t.Context()
	var typedNil *redis.Client
	cases := map[string]func() error{
		"fence 0":        func() error { return RedisGuard{}.Set(ctx, goredis.Conn(client), "k", "v", 0, 0) },
		"negative ttl":   func() error { return RedisGuard{}.Set(ctx, goredis.Conn(client), "k", "v", 1, -time.Second) },
		"sub-ms ttl":     func() error { return RedisGuard{}.Set(ctx, goredis.Conn(client), "k", "v", 1, time.Microsecond) },
		"empty key":      func() error { return RedisGuard{}.Set(ctx, goredis.Conn(client), "", "v", 1, 0) },
		"nil node":       func() error { return RedisGuard{}.Set(ctx, nil, "k", "v", 1, 0) },
		"typed nil node": func() error { return RedisGuard{}.Set(ctx, goredis.Conn(typedNil), "k", "v", 1, 0) },
		"bad comparison": func() error { return RedisGuard{Compare: 7}.Set(ctx, goredis.Conn(client), "k", "v", 1, 0) },
		"get typed nil":  func() error { _, _, err := RedisGuard{}.Get(ctx, goredis.Conn(typedNil), "k"); return err },
	}
	for name, call := range cases {
		assert.ErrorIs(t, call(), ErrInvalidArgument, name)
	}
	assert.Empty(t, srv.Keys(), "nothing written")
}

func TestRedisGuardContext(t *testing.T) {
	srv := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var g RedisGuard
	assert.ErrorIs(t, g.Set(ctx, goredis.Conn(client), "k", "v", 1, 0), context.Canceled)
	_, _, err := g.Get(ctx, goredis.Conn(client), "k")
	assert.ErrorIs(t, err, context.Canceled)
}

// TestRedisGuardConcurrentWriters: writers racing with random fences leave
// the value of the highest fence, whatever order their writes land in.
func TestRedisGuardConcurrentWriters(t *testing.T) {
	for name, client := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			const writers, each = 8, 50
			key := "guard:race"
			var (
				mu      sync.Mutex
				highest uint64
				wg      sync.WaitGroup
			)
			for range writers {
				wg.Go(func() {
					var g RedisGuard
					for range each {
						fence := rand.Uint64N(1000) + 1
						mu.Lock()
						highest = max(highest, fence)
						mu.Unlock()
						err := g.Set(ctx, goredis.Conn(client), key, strconv.FormatUint(fence, 10), fence, 0)
						if err != nil && !assert.ErrorIs(t, err, ErrFenceRejected) {
							return
						}
					}
				})
			}
			wg.Wait()
			v, f, err := RedisGuard{}.Get(ctx, goredis.Conn(client), key)
			require.NoError(t, err)
			assert.Equal(t, highest, f)
			assert.Equal(t, strconv.FormatUint(highest, 10), v)
		})
	}
}
