//go:build linux

package clockshim

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
)

// requireServerTime checks that the server's TIME is real time plus offset. The server reads its
// clock between the two readings taken here, so the bounds are exact but for TIME's microseconds.
func requireServerTime(t *testing.T, ctx context.Context, c *redis.Client, offset time.Duration) {
	t.Helper()
	before := time.Now()
	got, err := c.Time(ctx).Result()
	after := time.Now()
	require.NoError(t, err)
	low := before.Add(offset).Truncate(time.Microsecond)
	assert.False(t, got.Before(low), "TIME %v, want at least %v", got, low)
	assert.False(t, got.After(after.Add(offset)), "TIME %v, want at most %v", got, after.Add(offset))
}

func TestRedisStartsUnderShim(t *testing.T) {
	redistest.Need(t)
	c := newClock(t)
	c.Jump(24 * time.Hour)
	lib := strings.TrimPrefix(c.Env()[0], "LD_PRELOAD=")
	// Five starts in a row: the deadlock libfaketime hits comes at start, not every time.
	for i := range 5 {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		s := redistest.Start(t, redisserver.Options{Env: c.Env()})
		maps, err := os.ReadFile("/proc/" + strconv.Itoa(s.Pid()) + "/maps")
		require.NoError(t, err)
		assert.Contains(t, string(maps), lib, "start %d: the shim is loaded", i)
		requireServerTime(t, ctx, redistest.Client(t, s.Addr()), 24*time.Hour)
		require.NoError(t, s.Stop())
		cancel()
	}
}

func TestRedisTimeFollowsClock(t *testing.T) {
	redistest.Need(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := newClock(t)
	s := redistest.Start(t, redisserver.Options{Env: c.Env()})
	rc := redistest.Client(t, s.Addr())

	requireServerTime(t, ctx, rc, 0)
	c.Jump(time.Hour)
	requireServerTime(t, ctx, rc, time.Hour)
	c.Jump(-3 * time.Hour)
	requireServerTime(t, ctx, rc, -2*time.Hour)

	// A restarted server maps the state file afresh and resumes the clock where it is.
	require.NoError(t, s.Kill())
	require.NoError(t, s.Restart(ctx))
	requireServerTime(t, ctx, rc, -2*time.Hour)

	// Stopped: two TIMEs 10 ms apart agree to the microsecond.
	c.SetRate(0)
	first, err := rc.Time(ctx).Result()
	require.NoError(t, err)
	time.Sleep(10 * time.Millisecond)
	second, err := rc.Time(ctx).Result()
	require.NoError(t, err)
	assert.Equal(t, first, second)
}

// TestRedisKeyExpiresOnJump is the fault master-clock-jump injects: a master whose clock jumps
// forward expires a lock key early, and a master beside it, not under the clock, does not.
func TestRedisKeyExpiresOnJump(t *testing.T) {
	redistest.Need(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := newClock(t)
	jumped := redistest.Client(t, redistest.Start(t, redisserver.Options{Env: c.Env()}).Addr())
	plain := redistest.Client(t, redistest.Start(t, redisserver.Options{}).Addr())

	for _, rc := range []*redis.Client{jumped, plain} {
		require.NoError(t, rc.Set(ctx, "lock", "token", 10*time.Second).Err())
	}
	c.Jump(5 * time.Second)
	ttl, err := jumped.PTTL(ctx, "lock").Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, time.Duration(0), "the key lives on after a jump shorter than its TTL")
	assert.LessOrEqual(t, ttl, 5*time.Second, "its TTL counts down by the shifted clock")

	c.Jump(15 * time.Second)
	n, err := jumped.Exists(ctx, "lock").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "20 s ahead, the 10 s key is gone")

	n, err = plain.Exists(ctx, "lock").Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "the server without the shim keeps the key")
	requireServerTime(t, ctx, plain, 0)
}
