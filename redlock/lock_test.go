package redlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestUnlock(t *testing.T) {
	ctx := context.Background()
	t.Run("releases every master", func(t *testing.T) {
		servers, masters := miniMasters(t, 5)
		c := newTestClient(t, masters)
		res := resourceName(t)
		l, err := c.TryLock(ctx, res, time.Minute)
		require.NoError(t, err)
		settle(t, servers, res, l)
		require.NoError(t, l.Unlock(ctx))
		for _, s := range servers {
			assert.Eventually(t, func() bool { return !s.Exists("lock:" + res) }, time.Second, time.Millisecond)
		}
	})
	t.Run("twice", func(t *testing.T) {
		_, masters := miniMasters(t, 3)
		l, err := newTestClient(t, masters).TryLock(ctx, resourceName(t), time.Minute)
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
		assert.ErrorIs(t, l.Unlock(ctx), ErrLockNotHeld)
	})
	t.Run("expired everywhere", func(t *testing.T) {
		servers, masters := miniMasters(t, 3)
		l, err := newTestClient(t, masters).TryLock(ctx, resourceName(t), time.Second)
		require.NoError(t, err)
		for _, s := range servers {
			s.FastForward(2 * time.Second)
		}
		assert.ErrorIs(t, l.Unlock(ctx), ErrLockNotHeld)
	})
	t.Run("held on a minority only", func(t *testing.T) {
		servers, masters := miniMasters(t, 5)
		res := resourceName(t)
		l, err := newTestClient(t, masters).TryLock(ctx, res, time.Minute)
		require.NoError(t, err)
		settle(t, servers, res, l)
		for _, s := range servers[:3] {
			s.Del("lock:" + res)
		}
		err = l.Unlock(ctx)
		assert.ErrorIs(t, err, ErrLockNotHeld)
		for _, s := range servers {
			assert.False(t, s.Exists("lock:"+res), "the minority's keys are still released")
		}
	})
	t.Run("another holder's key is kept", func(t *testing.T) {
		servers, masters := miniMasters(t, 3)
		res := resourceName(t)
		l, err := newTestClient(t, masters).TryLock(ctx, res, time.Minute)
		require.NoError(t, err)
		settle(t, servers, res, l)
		for _, s := range servers {
			require.NoError(t, s.Set("lock:"+res, "new-holder"))
		}
		assert.ErrorIs(t, l.Unlock(ctx), ErrLockNotHeld)
		for _, s := range servers {
			v, _ := s.Get("lock:" + res)
			assert.Equal(t, "new-holder", v)
		}
	})
	t.Run("masters down: cannot tell", func(t *testing.T) {
		servers, masters := miniMasters(t, 3)
		l, err := newTestClient(t, masters).TryLock(ctx, resourceName(t), time.Minute)
		require.NoError(t, err)
		servers[0].Close()
		servers[1].Close()
		err = l.Unlock(ctx)
		assert.ErrorIs(t, err, ErrQuorumUnavailable)
		var me *MasterError
		require.ErrorAs(t, err, &me)
		assert.Equal(t, "release", me.Op)
	})
	t.Run("one master down: still a majority", func(t *testing.T) {
		servers, masters := miniMasters(t, 3)
		l, err := newTestClient(t, masters).TryLock(ctx, resourceName(t), time.Minute)
		require.NoError(t, err)
		servers[2].Close()
		assert.NoError(t, l.Unlock(ctx))
	})
	t.Run("cancelled context still releases", func(t *testing.T) {
		servers, masters := miniMasters(t, 3)
		res := resourceName(t)
		l, err := newTestClient(t, masters).TryLock(ctx, res, time.Minute)
		require.NoError(t, err)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		require.NoError(t, l.Unlock(cctx))
		for _, s := range servers {
			assert.Eventually(t, func() bool { return !s.Exists("lock:" + res) }, time.Second, time.Millisecond)
		}
	})
}

func TestExtend(t *testing.T) {
	ctx := context.Background()
	t.Run("moves the lease on every master", func(t *testing.T) {
		servers, masters := miniMasters(t, 3)
		res := resourceName(t)
		l, err := newTestClient(t, masters).TryLock(ctx, res, time.Second)
		require.NoError(t, err)
		// A SET still in flight could land after the PEXPIRE and reset the TTL.
		settle(t, servers, res, l)
		before := l.Until()
		require.NoError(t, l.Extend(ctx, time.Minute))
		assert.True(t, l.Until().After(before.Add(50*time.Second)))
		for _, s := range servers {
			// Extend returns at a majority; the last master may lag.
			assert.Eventually(t, func() bool { return s.TTL("lock:"+res) == time.Minute }, time.Second, time.Millisecond)
		}
		require.NoError(t, l.Unlock(ctx))
	})
	t.Run("majority lost", func(t *testing.T) {
		servers, masters := miniMasters(t, 3)
		res := resourceName(t)
		l, err := newTestClient(t, masters).TryLock(ctx, res, time.Minute)
		require.NoError(t, err)
		settle(t, servers, res, l)
		done := l.Done()
		servers[0].Del("lock:" + res)
		require.NoError(t, servers[1].Set("lock:"+res, "thief"))
		err = l.Extend(ctx, time.Minute)
		assert.ErrorIs(t, err, ErrLockNotHeld)
		assert.False(t, servers[0].Exists("lock:"+res), "Extend must not bring back a key")
		assertClosed(t, done, "a failed Extend closes Done")
		assert.ErrorIs(t, l.Extend(ctx, time.Minute), ErrLockNotHeld, "an ended lock stays ended")
	})
	t.Run("masters down", func(t *testing.T) {
		servers, masters := miniMasters(t, 3)
		l, err := newTestClient(t, masters).TryLock(ctx, resourceName(t), time.Minute)
		require.NoError(t, err)
		servers[0].Close()
		servers[1].Close()
		err = l.Extend(ctx, time.Minute)
		assert.ErrorIs(t, err, ErrQuorumUnavailable)
		var me *MasterError
		require.ErrorAs(t, err, &me)
		assert.Equal(t, "extend", me.Op)
		assertClosed(t, l.Done(), "a failed Extend closes Done")
	})
	t.Run("refused after the lease ran out", func(t *testing.T) {
		servers, masters := miniMasters(t, 3)
		res := resourceName(t)
		// The keys live on (miniredis time stands still): only the local
		// lease has passed, and that alone must stop a resurrection.
		l, err := newTestClient(t, masters, WithNodeTimeout(100*time.Millisecond)).TryLock(ctx, res, 200*time.Millisecond)
		require.NoError(t, err)
		time.Sleep(time.Until(l.Until()) + time.Millisecond)
		assert.ErrorIs(t, l.Extend(ctx, time.Minute), ErrLockNotHeld)
		assert.Equal(t, 200*time.Millisecond, servers[0].TTL("lock:"+res), "the TTL must be left as it was")
		assertClosed(t, l.Done(), "Done is closed once the lease ran out")
	})
	t.Run("after Unlock", func(t *testing.T) {
		_, masters := miniMasters(t, 3)
		l, err := newTestClient(t, masters).TryLock(ctx, resourceName(t), time.Minute)
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
		assert.ErrorIs(t, l.Extend(ctx, time.Minute), ErrLockNotHeld)
	})
}

func TestDone(t *testing.T) {
	ctx := context.Background()
	_, masters := miniMasters(t, 3)
	// 50 ms, not less: under -race on a loaded machine every call of an
	// Extend missed a 10 ms bound once.
	c := newTestClient(t, masters, WithNodeTimeout(50*time.Millisecond))
	t.Run("closes when validity runs out", func(t *testing.T) {
		l, err := c.TryLock(ctx, resourceName(t), 80*time.Millisecond)
		require.NoError(t, err)
		done := l.Done()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Done not closed after the lease")
		}
		assert.False(t, time.Now().Before(l.Until()), "Done closed before Until")
	})
	t.Run("closes on Unlock", func(t *testing.T) {
		l, err := c.TryLock(ctx, resourceName(t), time.Minute)
		require.NoError(t, err)
		done := l.Done()
		assertOpen(t, done)
		require.NoError(t, l.Unlock(ctx))
		assertClosed(t, done, "Unlock closes Done")
		assertClosed(t, l.Done(), "Done after Unlock is closed")
	})
	t.Run("Extend keeps it open", func(t *testing.T) {
		l, err := c.TryLock(ctx, resourceName(t), 300*time.Millisecond)
		require.NoError(t, err)
		done := l.Done()
		require.NoError(t, l.Extend(ctx, time.Minute))
		time.Sleep(400 * time.Millisecond)
		assertOpen(t, done)
		require.NoError(t, l.Unlock(ctx))
	})
}

func assertClosed(t *testing.T, ch <-chan struct{}, msg string) {
	t.Helper()
	select {
	case <-ch:
	default:
		t.Error(msg)
	}
}

func assertOpen(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
		t.Error("Done is closed while the lock is held")
	default:
	}
}

// TestConcurrentUnlockExtend races Unlock against Extend on one lock, in
// virtual time (no node timeout can be missed): the race detector
// watches, exactly one Unlock succeeds, and the lock ends released.
func TestConcurrentUnlockExtend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		servers, masters := memMasters(3)
		c := virtualClient(t, masters)
		ctx := context.Background()
		for i := range 50 {
			res := fmt.Sprintf("job-%d", i)
			l, err := c.TryLock(ctx, res, time.Minute)
			require.NoError(t, err)
			var wg sync.WaitGroup
			var unlocked atomic.Int64
			var mu sync.Mutex
			var errs []error // of the Unlocks that failed
			for range 4 {
				wg.Go(func() {
					err := l.Extend(ctx, time.Minute)
					if err != nil {
						assert.ErrorIs(t, err, ErrLockNotHeld)
					}
					_ = l.Until()
					_ = l.Done()
				})
				wg.Go(func() {
					if err := l.Unlock(ctx); err == nil {
						unlocked.Add(1)
					} else {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			assert.Equal(t, int64(1), unlocked.Load(), "exactly one Unlock succeeds; the others: %v", errs)
			assertClosed(t, l.Done(), "Done closed after Unlock")
			synctest.Wait() // the last master's release lands
			for _, s := range servers {
				_, held := s.Get("lock:" + res)
				assert.False(t, held, "%s still holds %s", s.Addr(), res)
			}
		}
	})
}

// TestNilLock: the nil *Lock of a failed TryLock holds nothing, and says
// so instead of panicking.
func TestNilLock(t *testing.T) {
	servers, masters := miniMasters(t, 1)
	c := newTestClient(t, masters)
	res := resourceName(t)
	require.NoError(t, servers[0].Set("lock:"+res, "another-holder"))
	var l *Lock
	l, err := c.TryLock(context.Background(), res, time.Minute)
	require.ErrorIs(t, err, ErrNotAcquired)
	require.Nil(t, l)

	assert.ErrorIs(t, l.Unlock(context.Background()), ErrLockNotHeld)
	assert.ErrorIs(t, l.Extend(context.Background(), time.Minute), ErrLockNotHeld)
	assert.ErrorIs(t, l.Renew(time.Minute, time.Hour), ErrLockNotHeld)
	l.Progress()
	assertClosed(t, l.Done(), "a nil lock's Done is open")
	assert.ErrorIs(t, context.Cause(l.Context()), ErrLockNotHeld)
	assert.Empty(t, l.Resource())
	assert.Nil(t, l.Resources())
	assert.Empty(t, l.Token())
	fence, ok := l.Fence()
	assert.False(t, ok)
	assert.Zero(t, fence)
	fences, ok := l.Fences()
	assert.False(t, ok)
	assert.Nil(t, fences)
	assert.True(t, l.Until().IsZero())
}
