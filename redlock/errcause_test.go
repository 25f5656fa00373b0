package redlock

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/driver/goredis"
	"quorumlock.dev/quorum"
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

// TestLostAttemptNamesEachMaster: the error of a lost acquisition says, per
// master and in the masters' order, what the attempt got there: the key
// (set, then released), a refusal naming the holder by the start of its
// token (never the whole token, which releases the lock), a refused
// connection; and a master that came back is called again.
func TestLostAttemptNamesEachMaster(t *testing.T) {
	servers, masters := miniMasters(t, 3)
	var downs []string
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		downs = append(downs, ln.Addr().String())
		require.NoError(t, ln.Close())
		down := redis.NewClient(&redis.Options{Addr: ln.Addr().String()})
		t.Cleanup(func() { _ = down.Close() })
		masters = append(masters, goredis.Conn(down))
	}

	// A node timeout far longer than a refused dial: a call that waited
	// for its master would end in "did not answer in time".
	c := newTestClient(t, masters, WithNodeTimeout(2*time.Second))
	t.Cleanup(func() { _ = c.Close() })
	res := resourceName(t)
	const foreign = "0123456789abcdef-another-holder"
	require.NoError(t, servers[0].Set("lock:"+res, foreign))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for attempt := range 3 {
		_, err := c.TryLock(ctx, res, 10*time.Second)
		require.ErrorIs(t, err, ErrNotAcquired, "attempt %d", attempt)
		assert.NotContains(t, err.Error(), foreign, "attempt %d: the holder's whole token is in the error", attempt)
		mes := masterErrors(err)
		require.Len(t, mes, 5, "attempt %d: one line per master: %v", attempt, err)
		for i, me := range mes {
			assert.Equal(t, "acquire", me.Op, "attempt %d, master %d", attempt, i)
			assert.Equal(t, c.addrs[i], me.Addr, "attempt %d: the masters' order", attempt)
		}
		assert.ErrorIs(t, mes[0].Err, errRefusedHeld)
		assert.Contains(t, mes[0].Err.Error(), `held by token "01234567…"`, "attempt %d", attempt)
		for _, i := range []int{1, 2} {
			assert.ErrorIs(t, mes[i].Err, errSetReleased, "attempt %d, master %d", attempt, i)
		}
		for _, i := range []int{3, 4} {
			assert.Contains(t, mes[i].Err.Error(), "connection refused", "attempt %d, master %d", attempt, i)
			if attempt > 0 {
				// Known to refuse: not called, no node timeout spent.
				assert.ErrorIs(t, mes[i].Err, errRefused, "attempt %d, master %d", attempt, i)
				assert.NotErrorIs(t, mes[i].Err, quorum.ErrTimeout, "attempt %d, master %d", attempt, i)
			}
		}
	}

	// The fifth master listens again: it is called, and the lock is won
	// on the three free masters.
	back := miniredis.NewMiniRedis()
	require.NoError(t, back.StartAddr(downs[1]))
	t.Cleanup(back.Close)
	l, err := c.TryLock(ctx, res, 10*time.Second)
	require.NoError(t, err, "the master that came back was not called")
	v, err := back.Get("lock:" + res)
	require.NoError(t, err)
	assert.Equal(t, l.Token(), v)
}
