package redlock

import (
	"context"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
	"quorumlock.dev/redlock/check"

	"quorumlock.dev/driver/goredis"
)

// waitMasters starts n redis-servers and returns a client of each and one
// more client of each for the test's own commands.
func waitMasters(t *testing.T, n int) (masters []Master, admin []*redis.Client) {
	t.Helper()
	for _, s := range redistest.StartN(t, n, redisserver.Options{}) {
		masters = append(masters, goredis.Conn(redistest.Client(t, s.Addr())))
		admin = append(admin, redistest.Client(t, s.Addr()))
	}
	return masters, admin
}

func counting(masters []Master, sets *atomic.Int64) []Master {
	out := make([]Master, len(masters))
	for i, m := range masters {
		out[i] = countingMaster{m.(full), sets}
	}
	return out
}

// subscribed waits until every server has a subscriber on resource's
// channel: the waiter is waiting.
func subscribed(t *testing.T, admin []*redis.Client, resource string) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, a := range admin {
			n, err := a.PubSubNumSub(context.Background(), "lock:"+resource).Result()
			if err != nil || n["lock:"+resource] < 1 {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond, "the waiter did not subscribe")
}

type lockResult struct {
	l   *Lock
	err error
	at  time.Time
}

func lockAsync(ctx context.Context, c *Client, resource string, ttl time.Duration) <-chan lockResult {
	out := make(chan lockResult, 1)
	go func() {
		l, err := c.Lock(ctx, resource, ttl)
		out <- lockResult{l, err, time.Now()}
	}()
	return out
}

// TestWaitWokenByRelease: the holder's Unlock wakes a waiter of another
// client at once. The holder's TTL and the retry delay are long, so only
// the published release can wake the waiter in time; after it won, its
// subscriptions are dropped.
func TestWaitWokenByRelease(t *testing.T) {
	masters, admin := waitMasters(t, 3)
	res := resourceName(t)
	holderC := newTestClient(t, masters)
	waiterC := newTestClient(t, masters, WithRetry(0, time.Minute, 0))
	t.Cleanup(func() { _ = waiterC.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	holder, err := holderC.TryLock(ctx, res, time.Minute)
	require.NoError(t, err)
	got := lockAsync(ctx, waiterC, res, time.Minute)
	subscribed(t, admin, res)
	time.Sleep(20 * time.Millisecond) // let the waiter go to sleep on its timer
	require.NoError(t, holder.Unlock(ctx))
	released := time.Now()

	r := <-got
	require.NoError(t, r.err)
	assert.Less(t, r.at.Sub(released), 10*time.Second, "the waiter slept through the release")
	require.NoError(t, r.l.Unlock(ctx))
	require.Eventually(t, func() bool {
		n, err := admin[0].PubSubNumSub(ctx, "lock:"+res).Result()
		return err == nil && n["lock:"+res] == 0
	}, 5*time.Second, time.Millisecond, "the channel is still subscribed after the wait")
}

// TestWaitLostNotification: a release that never reaches the waiter costs
// it the timer, not the lock.
func TestWaitLostNotification(t *testing.T) {
	t.Run("keys deleted without a message", func(t *testing.T) {
		masters, admin := waitMasters(t, 3)
		res := resourceName(t)
		const ttl = 2 * time.Second
		for _, a := range admin {
			require.NoError(t, a.Set(context.Background(), "lock:"+res, "gone-holder", ttl).Err())
		}
		c := newTestClient(t, masters, WithRetry(0, time.Minute, 0))
		t.Cleanup(func() { _ = c.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		start := time.Now()
		got := lockAsync(ctx, c, res, time.Minute)
		subscribed(t, admin, res)
		time.Sleep(20 * time.Millisecond)
		for _, a := range admin {
			require.NoError(t, a.Del(ctx, "lock:"+res).Err()) // no PUBLISH
		}
		r := <-got
		require.NoError(t, r.err)
		assert.GreaterOrEqual(t, r.at.Sub(start), ttl/2, "woken without a message")
		require.NoError(t, r.l.Unlock(ctx))
	})
	t.Run("subscription connections killed", func(t *testing.T) {
		masters, admin := waitMasters(t, 3)
		res := resourceName(t)
		holderC := newTestClient(t, masters)
		waiterC := newTestClient(t, masters, WithRetry(0, time.Minute, 0))
		t.Cleanup(func() { _ = waiterC.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		holder, err := holderC.TryLock(ctx, res, 2*time.Second)
		require.NoError(t, err)
		got := lockAsync(ctx, waiterC, res, time.Minute)
		subscribed(t, admin, res)
		for _, a := range admin {
			require.NoError(t, a.Do(ctx, "client", "kill", "type", "pubsub").Err())
		}
		require.NoError(t, holder.Unlock(ctx))
		r := <-got
		require.NoError(t, r.err, "a lost subscription broke the wait")
		require.NoError(t, r.l.Unlock(ctx))
	})
}

// TestCloseStopsSubscriptions: the subscriptions outlive a wait (one
// connection and two goroutines per master) until Close; after Close the
// client still locks, on its timer.
func TestCloseStopsSubscriptions(t *testing.T) {
	masters, admin := waitMasters(t, 3)
	res := resourceName(t)
	c := newTestClient(t, masters, WithRetry(0, 10*time.Millisecond, 0))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	holder, err := c.TryLock(ctx, res, time.Minute)
	require.NoError(t, err)
	pubsubClients := func() int {
		n := 0
		for _, a := range admin {
			list, err := a.ClientList(ctx).Result()
			require.NoError(t, err)
			n += pubsubLines(list)
		}
		return n
	}

	wctx, wcancel := context.WithCancel(ctx)
	got := lockAsync(wctx, c, res, time.Minute)
	subscribed(t, admin, res)
	assert.Equal(t, len(masters), pubsubClients(), "one subscription connection per master")
	during := runtime.NumGoroutine()
	wcancel()
	require.ErrorIs(t, (<-got).err, ErrNotAcquired)

	require.NoError(t, c.Close())
	require.NoError(t, c.Close(), "Close is idempotent")
	// Other goroutines only end meanwhile: Close must end at least the
	// subscribers' two per master.
	require.Eventually(t, func() bool { return runtime.NumGoroutine() <= during-2*len(masters) }, 5*time.Second, 10*time.Millisecond,
		"goroutines left after Close: %d, while waiting: %d", runtime.NumGoroutine(), during)

	// Locking after Close works, without push.
	go func() {
		time.Sleep(50 * time.Millisecond)
		_ = holder.Unlock(context.WithoutCancel(ctx))
	}()
	l, err := c.Lock(ctx, res, time.Minute)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	assert.Equal(t, 0, pubsubClients(), "Lock after Close subscribed again")
}

// pubsubLines counts the connections of a CLIENT LIST reply that have a
// subscription.
func pubsubLines(list string) int {
	n := 0
	for line := range strings.Lines(list) {
		if strings.Contains(line, " sub=") && !strings.Contains(line, " sub=0 ") {
			n++
		}
	}
	return n
}

// TestWaitRetryCap: WithRetry's attempts still cap a Lock that waits on a
// holder's TTL (miniredis: its keys do not expire unless told).
func TestWaitRetryCap(t *testing.T) {
	servers, masters := miniMasters(t, 3)
	res := resourceName(t)
	for _, s := range servers {
		require.NoError(t, s.Set("lock:"+res, "someone-else"))
		s.SetTTL("lock:"+res, 50*time.Millisecond)
	}
	var sets atomic.Int64
	c := newTestClient(t, counting(masters, &sets), WithRetry(3, time.Millisecond, 0))
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Lock(ctx, res, time.Minute)
	assert.Nil(t, l)
	require.ErrorIs(t, err, ErrNotAcquired)
	require.NoError(t, ctx.Err(), "the cap, not the context, ended Lock")
	// The first on every master, the next two refused by the probe
	// master alone (probeMaster).
	assert.Equal(t, int64(3+2*1), sets.Load(), "3 attempts on 3 masters")
}

// TestWaitCancelled: ending the context ends a long wait promptly.
func TestWaitCancelled(t *testing.T) {
	servers, masters := miniMasters(t, 3)
	res := resourceName(t)
	for _, s := range servers {
		require.NoError(t, s.Set("lock:"+res, "someone-else"))
		s.SetTTL("lock:"+res, time.Minute)
	}
	c := newTestClient(t, masters, WithRetry(0, time.Minute, 0))
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wctx, wcancel := context.WithCancel(ctx)
	got := lockAsync(wctx, c, res, time.Minute)
	time.Sleep(100 * time.Millisecond)
	wcancel()
	cancelled := time.Now()
	select {
	case r := <-got:
		assert.Nil(t, r.l)
		assert.ErrorIs(t, r.err, ErrNotAcquired)
		assert.ErrorIs(t, r.err, context.Canceled)
		assert.Less(t, r.at.Sub(cancelled), 5*time.Second)
	case <-ctx.Done():
		t.Fatal("Lock did not return after its context was cancelled")
	}
}

// plainMaster hides every method but Master's: a master that cannot
// subscribe.
type plainMaster struct{ Master }

// TestWaitWithoutSubscribe: masters that cannot subscribe are waited on by
// the retry delay, and no subscriber is started.
func TestWaitWithoutSubscribe(t *testing.T) {
	_, masters := miniMasters(t, 3)
	plain := make([]Master, len(masters))
	for i, m := range masters {
		plain[i] = plainMaster{m}
	}
	c := newTestClient(t, plain, WithRetry(0, 10*time.Millisecond, 10*time.Millisecond))
	t.Cleanup(func() { _ = c.Close() })
	res := resourceName(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	holder, err := c.TryLock(ctx, res, time.Minute)
	require.NoError(t, err)
	go func() {
		time.Sleep(100 * time.Millisecond)
		_ = holder.Unlock(context.WithoutCancel(ctx))
	}()
	l, err := c.Lock(ctx, res, time.Minute)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	assert.Zero(t, c.push.Subscribers(), "a subscriber for a master without Subscribe")
	// Check says so: a driver that cannot subscribe is not silent.
	rep, err := c.Check(ctx)
	require.NoError(t, err)
	for _, n := range rep.Masters {
		found := false
		for _, f := range n.Findings {
			if f.Setting == "push wake-up" {
				found = true
				assert.Equal(t, check.Warning, f.Status)
				assert.Equal(t, "no", f.Value)
			}
		}
		assert.True(t, found, "%s: no push wake-up finding", n.Node)
	}
	full, err := New(masters)
	require.NoError(t, err)
	rep, err = full.Check(ctx)
	require.NoError(t, err)
	for _, f := range rep.Masters[0].Findings {
		assert.NotEqual(t, "push wake-up", f.Setting, "a master that can subscribe")
	}
}
