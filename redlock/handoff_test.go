package redlock

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFairDirectHandoff: a release hands the lock to a queued waiter of the
// same client in its own round: the waiter's key is on every master, its
// entry is gone, and no reservation is left.
func TestFairDirectHandoff(t *testing.T) {
	masters, admin := waitMasters(t, 5)
	res := resourceName(t)
	c := fairClient(t, masters, DefaultFairEntryTTL)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	holder, err := c.TryLock(ctx, res, time.Minute)
	require.NoError(t, err)
	heldEverywhere(t, admin, res, holder)
	waiting := lockAsync(ctx, c, res, time.Minute)
	queuedOn(t, admin, res, 1)
	require.NoError(t, holder.Unlock(ctx))
	w := <-waiting
	require.NoError(t, w.err)
	assert.Equal(t, uint64(1), c.handed.Load(), "the lock was not handed over by the release")
	assert.NotEqual(t, holder.Token(), w.l.Token())
	heldEverywhere(t, admin, res, w.l)
	queuedOn(t, admin, res, 0)
	assert.Greater(t, time.Until(w.l.Until()), 50*time.Second, "the handed lease is not counted from the handoff")
	require.NoError(t, w.l.Unlock(ctx))
	q, e, _ := queueKeys("lock:" + res)
	for _, a := range admin {
		n, err := a.Exists(ctx, q, e, "lock:"+res).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "%s: a key, queue or reservation is left", a.Options().Addr)
	}
}

// TestFairHandoffKeepsOrderAcrossClients: a waiter of another client that
// queued first gets the lock before a later waiter of the releaser's own
// client: the release hands over only to the head of the masters' queue.
func TestFairHandoffKeepsOrderAcrossClients(t *testing.T) {
	masters, admin := waitMasters(t, 3)
	res := resourceName(t)
	mine := fairClient(t, masters, DefaultFairEntryTTL)
	other := fairClient(t, masters, DefaultFairEntryTTL)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	holder, err := mine.TryLock(ctx, res, time.Minute)
	require.NoError(t, err)
	heldEverywhere(t, admin, res, holder)
	first := lockAsync(ctx, other, res, time.Minute)
	queuedOn(t, admin, res, 1)
	second := lockAsync(ctx, mine, res, time.Minute)
	queuedOn(t, admin, res, 2)
	require.NoError(t, holder.Unlock(ctx))

	r := <-first
	require.NoError(t, r.err, "the waiter that queued first did not get the lock")
	select {
	case s := <-second:
		t.Fatalf("the releaser's own waiter cut in (err %v)", s.err)
	case <-time.After(50 * time.Millisecond):
	}
	assert.Zero(t, mine.handed.Load(), "handed to a waiter that was not the head")
	require.NoError(t, r.l.Unlock(ctx))
	s := <-second
	require.NoError(t, s.err)
	require.NoError(t, s.l.Unlock(ctx))
}

// TestFairHandoffUnderLoad: goroutines of one fair client, some giving up
// at random, take turns; no two hold at once, most handoffs are direct, and
// no key or queue entry is left behind.
func TestFairHandoffUnderLoad(t *testing.T) {
	masters, admin := waitMasters(t, 5)
	res := resourceName(t)
	c := fairClient(t, masters, DefaultFairEntryTTL)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const workers, perWorker = 6, 15
	var (
		holding, most, sections, gaveUp atomic.Int32
		wg                              sync.WaitGroup
	)
	for k := range workers {
		wg.Go(func() {
			for j := range perWorker {
				lctx, lcancel := ctx, context.CancelFunc(func() {})
				if (k+j)%5 == 4 {
					// Give up while queued, sometimes just as a release hands
					// the lock over.
					lctx, lcancel = context.WithTimeout(ctx, time.Duration(1+j%3)*time.Millisecond)
				}
				l, err := c.Lock(lctx, res, 10*time.Second)
				lcancel()
				if err != nil {
					if !assert.ErrorIs(t, err, context.DeadlineExceeded) {
						return
					}
					gaveUp.Add(1)
					continue
				}
				n := holding.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(time.Millisecond)
				holding.Add(-1)
				assert.NoError(t, l.Unlock(ctx))
				sections.Add(1)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int32(1), most.Load(), "two holders at once")
	assert.Equal(t, int32(workers*perWorker), sections.Load()+gaveUp.Load())
	assert.Greater(t, c.handed.Load(), uint64(sections.Load()/2), "fewer than half the sections were handed over directly")
	t.Logf("%d sections, %d handed over directly, %d gave up", sections.Load(), c.handed.Load(), gaveUp.Load())
	q, e, _ := queueKeys("lock:" + res)
	// Entries of waiters that gave up while a call was in flight expire
	// with the entry TTL; nothing lives longer.
	assert.Eventually(t, func() bool {
		for _, a := range admin {
			if n, err := a.Exists(ctx, q, e, "lock:"+res).Result(); err != nil || n != 0 {
				return false
			}
		}
		return true
	}, 2*DefaultFairEntryTTL, 10*time.Millisecond, "a key, queue or reservation outlived the waiters")
}
