package redlock

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/internal/harness/memredis"
)

// TestCloseWaitsForCallsOut: Close lets the calls the client still has out
// finish before it returns (a node timeout at most), so that a program
// that closes its Redis clients after Close does not cut them: Unlock's
// releases that a majority's confirmation did not wait for, and a fair
// waiter's leaving of the queue. Before, Close returned at once: on five
// redis-servers, 200 cycles of TryLock, Unlock, Close and closing the
// go-redis clients left 86 keys on minorities of the masters, each for
// its TTL.
func TestCloseWaitsForCallsOut(t *testing.T) {
	const slow = 20 * time.Millisecond // under the default node timeout
	t.Run("Unlock's releases", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			servers, c, l := heldOnThree(t)
			ctx := context.Background()
			servers[2].Hang()
			time.AfterFunc(slow, servers[2].Resume)
			require.NoError(t, l.Unlock(ctx), "masters 0 and 1 confirmed")
			require.True(t, servers[2].Exists("lock:job"), "the slow master's release returned before Unlock")
			start := time.Now()
			require.NoError(t, c.Close())
			assert.Equal(t, slow, time.Since(start), "Close did not wait for the release still out")
			assert.False(t, servers[2].Exists("lock:job"), "the release still out when Close returned")
		})
	})
	t.Run("a fair waiter leaving", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			servers, masters := memMasters(3)
			holder := virtualClient(t, masters)
			c := virtualClient(t, masters, WithFairness(time.Minute))
			ctx := context.Background()
			l, err := holder.TryLock(ctx, "job", time.Minute)
			require.NoError(t, err)
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			done := make(chan error)
			go func() {
				_, err := c.Lock(wctx, "job", time.Minute)
				done <- err
			}()
			synctest.Wait() // queued on every master, asleep
			for _, s := range servers {
				require.Greater(t, len(s.Keys()), 1, "the waiter's queue beside the lock key on %s", s.Addr())
			}
			servers[2].Hang()
			time.AfterFunc(slow, servers[2].Resume)
			cancel()
			require.ErrorIs(t, <-done, context.Canceled)
			start := time.Now()
			require.NoError(t, c.Close())
			assert.Equal(t, slow, time.Since(start), "Close did not wait for the leave still out")
			for _, s := range servers {
				assert.Equal(t, []string{"lock:job"}, s.Keys(), "the waiter's queue entry on %s when Close returned", s.Addr())
			}
			require.NoError(t, l.Unlock(ctx))
		})
	})
	t.Run("a hung master", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			servers, c, l := heldOnThree(t)
			ctx := context.Background()
			servers[2].Hang()
			defer servers[2].Resume()
			require.NoError(t, l.Unlock(ctx))
			start := time.Now()
			require.NoError(t, c.Close())
			assert.Equal(t, c.cfg.nodeTimeout, time.Since(start), "Close waits a node timeout at most")
		})
	})
}

// heldOnThree is a client of three in-memory masters and its lock on "job",
// set on every master; call it inside the bubble.
func heldOnThree(t *testing.T) ([]*memredis.Server, *Client, *Lock) {
	t.Helper()
	servers, masters := memMasters(3)
	c := virtualClient(t, masters)
	l, err := c.TryLock(context.Background(), "job", time.Minute)
	require.NoError(t, err)
	synctest.Wait() // the last SET landed
	return servers, c, l
}
