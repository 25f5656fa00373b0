package fair

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/driver"
	"quorumlock.dev/internal/harness/memredis"
	"quorumlock.dev/redlock/internal/push"
)

// TestLateAttemptLeavesLaterKey: fair_lock.lua takes over a key that holds
// a token of an earlier attempt of the same waiter (a key handed to it, or
// one its release has not reached yet), but a call of an earlier attempt
// that arrives late leaves a later attempt's key alone: that attempt may
// hold the lock with it, counted on this master.
func TestLateAttemptLeavesLaterKey(t *testing.T) {
	s := memredis.New()
	ctx := context.Background()
	attempt := func(token string) []any {
		t.Helper()
		prefix, _, _ := strings.Cut(token, ".")
		got, err := s.Conn().Eval(ctx, LockScript, []string{"lock:late"}, token, 2000, "00000000000001abcdefgh"+prefix, 1, 3000, "abcdefgh", prefix)
		require.NoError(t, err)
		return got.([]any)
	}
	s.Set("lock:late", "p.2", time.Minute)
	got := attempt("p.1")
	assert.Equal(t, int64(0), got[0], "a late call of attempt 1 took attempt 2's key")
	v, _ := s.Get("lock:late")
	assert.Equal(t, "p.2", v)
	assert.Equal(t, []any{int64(1)}, attempt("p.3"), "attempt 3 takes over attempt 2's key")
	v, _ = s.Get("lock:late")
	assert.Equal(t, "p.3", v)
	assert.Equal(t, int64(0), attempt("q.9")[0], "another waiter's key is not taken over")
}

// TestTakeoverTellsPlainWaiters: when fair_lock.lua takes over a key that
// holds an earlier attempt's token of the same waiter, it publishes that
// token on push.HandedChannel of the key: a waiter of a client without
// fairness that read the key before sleeps on that token, and no release
// of it is coming. Without it, such a waiter slept until the old token's
// expiry (the simulator with -sim.plainmixed, seed 3720243421610004774:
// 0.8 s of a free resource with a plain waiter).
func TestTakeoverTellsPlainWaiters(t *testing.T) {
	s := memredis.New()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sub := s.Conn().(driver.Subscriber).Subscribe(ctx)
	defer sub.Close()
	require.NoError(t, sub.Subscribe(ctx, push.HandedChannel("lock:over")))
	require.NoError(t, sub.Ping(ctx, "1"))
	p, err := sub.Receive(ctx)
	require.NoError(t, err)
	require.True(t, p.Pong, "the subscription is not confirmed: %+v", p)

	s.Set("lock:over", "p.2", time.Minute)
	got, err := s.Conn().Eval(ctx, LockScript, []string{"lock:over"}, "p.3", 2000, "00000000000001abcdefghp", 1, 3000, "abcdefgh", "p")
	require.NoError(t, err)
	require.Equal(t, []any{int64(1)}, got, "attempt 3 takes over attempt 2's key")
	p, err = sub.Receive(ctx)
	require.NoError(t, err)
	assert.Equal(t, driver.Push{Channel: push.HandedChannel("lock:over"), Payload: "p.2"}, p, "the takeover was not told")
}
