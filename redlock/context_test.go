package redlock

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/internal/harness/memredis"
)

// waitDone waits for ctx to end, bounded so that a lock that is never
// ended fails the test instead of hanging it.
func waitDone(t *testing.T, ctx context.Context, within time.Duration, msg string) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(within):
		t.Fatal(msg)
	}
}

// TestContext in virtual time: the context ends exactly when the lease
// does, and not while an Extend keeps it.
func TestContext(t *testing.T) {
	ctx := context.Background()
	virtual := func(t *testing.T, f func(t *testing.T, servers []*memredis.Server, c *Client)) {
		synctest.Test(t, func(t *testing.T) {
			servers, masters := memMasters(3)
			f(t, servers, virtualClient(t, masters))
		})
	}
	t.Run("cancelled by Unlock", func(t *testing.T) {
		virtual(t, func(t *testing.T, _ []*memredis.Server, c *Client) {
			l, err := c.TryLock(ctx, "job", time.Minute)
			require.NoError(t, err)
			lctx := l.Context()
			assert.Same(t, lctx, l.Context(), "one context per lock")
			assert.NoError(t, lctx.Err())
			_, hasDeadline := lctx.Deadline()
			assert.False(t, hasDeadline, "Extend moves the end: no fixed deadline")

			require.NoError(t, l.Unlock(ctx))
			assertClosed(t, lctx.Done(), "Unlock cancels the context")
			assert.ErrorIs(t, lctx.Err(), context.Canceled)
			cause := context.Cause(lctx)
			assert.ErrorIs(t, cause, ErrLockNotHeld)
			assert.NotErrorIs(t, cause, ErrLockLost, "a released lock was not lost")
		})
	})
	t.Run("after Unlock already done", func(t *testing.T) {
		virtual(t, func(t *testing.T, _ []*memredis.Server, c *Client) {
			l, err := c.TryLock(ctx, "job", time.Minute)
			require.NoError(t, err)
			require.NoError(t, l.Unlock(ctx))
			lctx := l.Context()
			assertClosed(t, lctx.Done(), "Context after Unlock is done")
			assert.ErrorIs(t, context.Cause(lctx), ErrLockNotHeld)
		})
	})
	t.Run("validity runs out", func(t *testing.T) {
		virtual(t, func(t *testing.T, _ []*memredis.Server, c *Client) {
			l, err := c.TryLock(ctx, "job", 150*time.Millisecond)
			require.NoError(t, err)
			lctx := l.Context()
			at := ended(t, lctx)
			assert.False(t, at.Before(l.Until()), "cancelled before Until")
			assert.Less(t, at.Sub(l.Until()), leaseCheck+time.Millisecond, "cancelled late")
			assert.ErrorIs(t, context.Cause(lctx), ErrLockLost)
			// Unlock afterwards keeps the cause: the lock was lost first.
			_ = l.Unlock(ctx)
			assert.ErrorIs(t, context.Cause(lctx), ErrLockLost)
		})
	})
	t.Run("failed Extend", func(t *testing.T) {
		virtual(t, func(t *testing.T, servers []*memredis.Server, c *Client) {
			l, err := c.TryLock(ctx, "job", time.Minute)
			require.NoError(t, err)
			synctest.Wait()
			lctx := l.Context()
			for _, s := range servers[:2] {
				s.Del("lock:job")
			}
			require.ErrorIs(t, l.Extend(ctx, time.Minute), ErrLockNotHeld)
			assertClosed(t, lctx.Done(), "a failed Extend cancels the context")
			cause := context.Cause(lctx)
			assert.ErrorIs(t, cause, ErrLockLost)
			assert.ErrorIs(t, cause, ErrLockNotHeld, "the cause carries Extend's error")
		})
	})
	t.Run("Extend keeps it alive", func(t *testing.T) {
		virtual(t, func(t *testing.T, _ []*memredis.Server, c *Client) {
			l, err := c.TryLock(ctx, "job", 150*time.Millisecond)
			require.NoError(t, err)
			lctx := l.Context()
			require.NoError(t, l.Extend(ctx, time.Minute))
			time.Sleep(59 * time.Second)
			assert.NoError(t, lctx.Err(), "cancelled although extended")
			require.NoError(t, l.Unlock(ctx))
		})
	})
	t.Run("a lock that never asks pays nothing", func(t *testing.T) {
		virtual(t, func(t *testing.T, _ []*memredis.Server, c *Client) {
			l, err := c.TryLock(ctx, "job", time.Minute)
			require.NoError(t, err)
			require.NoError(t, l.Unlock(ctx))
			l.mu.Lock()
			defer l.mu.Unlock()
			assert.Nil(t, l.ctx, "no context made")
			assert.Nil(t, l.timer, "no timer started")
		})
	})
}

// TestContextAfterSuspend: the machine sleeps past the lease; the context
// ends on the clock that counts the suspend.
func TestContextAfterSuspend(t *testing.T) {
	_, masters := miniMasters(t, 3)
	c := newTestClient(t, masters)
	clk := &suspendClock{}
	c.clock = clk
	l, err := c.TryLock(context.Background(), resourceName(t), time.Minute)
	require.NoError(t, err)
	lctx := l.Context()
	clk.sleep(2 * time.Minute)
	waitDone(t, lctx, 3*leaseCheck, "context not cancelled after the suspend")
	assert.ErrorIs(t, context.Cause(lctx), ErrLockLost)
}

func TestDo(t *testing.T) {
	ctx := context.Background()
	servers, masters := miniMasters(t, 3)
	c := newTestClient(t, masters, WithNodeTimeout(100*time.Millisecond), WithRetry(1, 0, 0))
	gone := func(t *testing.T, res string) {
		t.Helper()
		for _, s := range servers {
			assert.Eventually(t, func() bool { return !s.Exists("lock:" + res) }, time.Second, time.Millisecond)
		}
	}

	t.Run("runs fn under the lock and releases", func(t *testing.T) {
		res := resourceName(t)
		var fctx context.Context
		err := c.Do(ctx, res, time.Minute, func(ctx context.Context, l *Lock) error {
			fctx = ctx
			assert.Equal(t, res, l.Resource())
			assert.NoError(t, ctx.Err())
			assert.Equal(t, len(servers), holdersEventually(t, servers, res, l.Token()))
			return nil
		})
		require.NoError(t, err)
		assertClosed(t, fctx.Done(), "fn's context ends with Do")
		gone(t, res)
	})
	t.Run("fn's error", func(t *testing.T) {
		res := resourceName(t)
		boom := errors.New("boom")
		err := c.Do(ctx, res, time.Minute, func(context.Context, *Lock) error { return boom })
		assert.ErrorIs(t, err, boom)
		assert.NotErrorIs(t, err, ErrLockLost)
		gone(t, res)
	})
	t.Run("lost while fn ran", func(t *testing.T) {
		boom := errors.New("interrupted")
		err := c.Do(ctx, resourceName(t), 150*time.Millisecond, func(ctx context.Context, l *Lock) error {
			waitDone(t, ctx, 5*time.Second, "fn's context not cancelled when the lease ran out")
			assert.ErrorIs(t, context.Cause(ctx), ErrLockLost)
			return boom
		})
		assert.ErrorIs(t, err, boom)
		assert.ErrorIs(t, err, ErrLockLost)
	})
	t.Run("lost on the masters unseen", func(t *testing.T) {
		res := resourceName(t)
		err := c.Do(ctx, res, time.Minute, func(ctx context.Context, l *Lock) error {
			settle(t, servers, res, l)
			for _, s := range servers[:2] {
				s.Del("lock:" + res) // expired early, say a master's clock jumped
			}
			return nil
		})
		assert.ErrorIs(t, err, ErrLockLost, "Unlock found no majority: the lock was gone while fn ran")
	})
	t.Run("caller's context ends", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		res := resourceName(t)
		err := c.Do(cctx, res, time.Minute, func(ctx context.Context, l *Lock) error {
			cancel()
			waitDone(t, ctx, 5*time.Second, "fn's context not cancelled with the caller's")
			return ctx.Err()
		})
		assert.ErrorIs(t, err, context.Canceled)
		assert.NotErrorIs(t, err, ErrLockLost, "the lock was held to the end")
		gone(t, res)
	})
	t.Run("not acquired: fn not run", func(t *testing.T) {
		res := resourceName(t)
		other, err := c.TryLock(ctx, res, time.Minute)
		require.NoError(t, err)
		defer other.Unlock(ctx)
		err = c.Do(ctx, res, time.Minute, func(context.Context, *Lock) error {
			t.Error("fn ran without the lock")
			return nil
		})
		assert.ErrorIs(t, err, ErrNotAcquired)
	})
	t.Run("fn panics: released, panic goes on", func(t *testing.T) {
		res := resourceName(t)
		assert.PanicsWithValue(t, "bad", func() {
			_ = c.Do(ctx, res, time.Minute, func(context.Context, *Lock) error { panic("bad") })
		})
		gone(t, res)
	})
	t.Run("fn unlocks itself", func(t *testing.T) {
		err := c.Do(ctx, resourceName(t), time.Minute, func(ctx context.Context, l *Lock) error {
			return l.Unlock(ctx)
		})
		assert.NoError(t, err)
	})
}

// holdersEventually waits for every master to take the key (TryLock returns
// at a majority) and returns how many hold token.
func holdersEventually(t *testing.T, servers []*miniredis.Miniredis, res, token string) int {
	t.Helper()
	assert.Eventually(t, func() bool { return holders(t, servers, res, token) == len(servers) }, time.Second, time.Millisecond)
	return holders(t, servers, res, token)
}

// TestDoneAfterPauseVirtual: a holder that first asks for Done (or the
// Context) after its lease ran out, as one paused past its lease does, finds
// it closed at once, with ErrLockLost as the cause; a Done asked for before
// is closed by the lease's end too. (Found by the simulator, seed 1: the
// context made late started a timer instead, and a select on Done took
// the default branch and wrote.)
func TestDoneAfterPauseVirtual(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, masters := memMasters(3)
		c := virtualClient(t, masters)
		ctx := context.Background()
		late, err := c.TryLock(ctx, "paused", time.Second)
		require.NoError(t, err)
		early, err := c.TryLock(ctx, "watched", time.Second)
		require.NoError(t, err)
		watched := early.Done()
		time.Sleep(time.Until(late.Until()) + time.Millisecond) // the pause
		select {
		case <-late.Done():
		default:
			t.Fatal("Done asked for after the lease's end is not closed")
		}
		assert.ErrorIs(t, context.Cause(late.Context()), ErrLockLost)
		select {
		case <-watched:
		default:
			t.Fatal("Done asked for before the lease's end is not closed after it")
		}
	})
}
