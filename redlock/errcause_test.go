package redlock

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/driver/goredis"
)

// TestFrozenMastersCallerDeadline: 2 of 3 masters hang and the caller's
// deadline (20 ms) ends the attempt before the node timeout: masters that
// did not answer are unavailability, not another holder.
func TestFrozenMastersCallerDeadline(t *testing.T) {
	_, healthy := miniMasters(t, 1)
	masters := conns(healthy[0])
	for range 2 {
		hung := redis.NewClient(&redis.Options{Addr: hungServer(t), MaxRetries: -1})
		t.Cleanup(func() { _ = hung.Close() })
		masters = append(masters, goredis.Conn(hung))
	}
	obs := newLockLog()
	c := newTestClient(t, masters, WithHooks(hooksOf(obs)), WithNodeTimeout(500*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	l, err := c.TryLock(ctx, resourceName(t), time.Minute)
	assert.Nil(t, l)
	assert.ErrorIs(t, err, ErrQuorumUnavailable)
	assert.NotErrorIs(t, err, ErrNotAcquired, "two masters that did not answer were taken for holders")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	attempts, _, _ := obs.take()
	require.Len(t, attempts, 1)
	assert.ErrorIs(t, attempts[0].err, ErrQuorumUnavailable)
}

// TestRefusedPortCause: two masters of three whose ports refuse
// connections, behind go-redis clients that redial (5 times, 100 ms apart,
// by default) and say why only in their log: their calls miss the node
// timeout, and the error of the very first attempt says why they failed,
// not only that they did not answer in time; so do the breaker's skips
// that follow.
func TestRefusedPortCause(t *testing.T) {
	_, masters := miniMasters(t, 1)
	var refused []string
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		refused = append(refused, ln.Addr().String())
		require.NoError(t, ln.Close())
		down := redis.NewClient(&redis.Options{Addr: ln.Addr().String()})
		t.Cleanup(func() { _ = down.Close() })
		masters = append(masters, goredis.Conn(down))
	}
	c := newTestClient(t, masters, WithNodeTimeout(200*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for attempt := range 8 { // past the breaker's four node timeouts: skips
		_, err := c.TryLock(ctx, resourceName(t), time.Second)
		require.ErrorIs(t, err, ErrQuorumUnavailable)
		var errs []string
		for _, me := range masterErrors(err) {
			if slices.Contains(refused, me.Addr) {
				errs = append(errs, me.Err.Error())
			}
		}
		require.Len(t, errs, 2, "attempt %d", attempt)
		for _, e := range errs {
			assert.Contains(t, e, "connection refused", "attempt %d: a down master's error does not say why it failed", attempt)
		}
		if attempt == 0 {
			t.Logf("%s", errs[0])
		}
	}
}
