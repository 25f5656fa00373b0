package redlock

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/redlock/internal/node"
)

// A call that failed because the caller's own context had ended never
// reached the master (go-redis gives up before it takes a connection): it
// says nothing of the master, and costs it neither its vote nor its place
// in the next round.

// TestCallerCancelNotCountedByGuard: with the restart guard, an Extend
// whose context had already ended does not make the masters suspects: the
// next TryLock on a fresh resource counts every vote.
func TestCallerCancelNotCountedByGuard(t *testing.T) {
	_, masters := agedServers(t, 3, 2*time.Second, redisserver.Options{})
	c := newTestClient(t, masters, WithRestartGuard(time.Hour), WithNodeTimeout(250*time.Millisecond))
	t.Cleanup(func() { _ = c.Close() })
	sampled(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ended, stop := context.WithCancel(ctx)
	stop()
	for k := range 10 {
		l, err := c.TryLock(ctx, resourceName(t), 500*time.Millisecond)
		require.NoError(t, err, "round %d", k)
		err = l.Extend(ended, 500*time.Millisecond)
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, ErrQuorumUnavailable, "the caller's cancellation taken for the masters'")
		l2, err := c.TryLock(ctx, resourceName(t), 500*time.Millisecond)
		require.NoError(t, err, "round %d: the second TryLock after an Extend with an ended context", k)
		for i := range masters {
			assert.False(t, c.watcher.Quarantined(i), "round %d: master %d out after the caller's cancellation", k, i)
		}
		require.NoError(t, l2.Unlock(ctx))
	}
}

// TestCallerCancelNotCountedByBreaker: an Extend whose context had ended,
// then more than the breaker's quiet time idle: the masters are not taken
// out, and 8 TryLocks at once all win.
func TestCallerCancelNotCountedByBreaker(t *testing.T) {
	masters, _ := waitMasters(t, 3)
	const nodeTimeout = 250 * time.Millisecond // room for -race on a loaded machine: 8 TryLocks at once must all win
	c := newTestClient(t, masters, WithNodeTimeout(nodeTimeout))
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := c.TryLock(ctx, resourceName(t), 500*time.Millisecond)
	require.NoError(t, err)
	ended, stop := context.WithCancel(ctx)
	stop()
	require.ErrorIs(t, l.Extend(ended, 500*time.Millisecond), context.Canceled)
	time.Sleep(node.OutAfter*nodeTimeout + 50*time.Millisecond)
	for i := range masters {
		probe, err := c.enter(ctx, i)
		require.NoError(t, err, "master %d is out after the caller's cancellation", i)
		require.False(t, probe, "master %d is probed after the caller's cancellation", i)
		c.health[i].Exit(c.nanos(), probe, true)
	}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for k := range errs {
		wg.Go(func() {
			var l *Lock
			if l, errs[k] = c.TryLock(ctx, resourceName(t), 500*time.Millisecond); errs[k] == nil {
				errs[k] = l.Unlock(ctx)
			}
		})
	}
	wg.Wait()
	for k, err := range errs {
		assert.NoError(t, err, "TryLock %d", k)
	}
}

// TestRoundDeadlineStillCounts: the twin: a master that does not answer
// within the round's own deadline is still a master that did not reply.
func TestRoundDeadlineStillCounts(t *testing.T) {
	masters, _ := waitMasters(t, 3)
	c := newTestClient(t, masters, WithNodeTimeout(50*time.Millisecond))
	t.Cleanup(func() { _ = c.Close() })
	var calls sync.WaitGroup
	calls.Add(len(masters))
	round := c.group.Do(context.Background(), func(ctx context.Context, i int) (bool, error) {
		defer calls.Done()
		probe, err := c.enter(ctx, i)
		if err != nil {
			return false, err
		}
		<-ctx.Done() // a master that hangs past the node timeout
		c.exit(ctx, i, probe, ctx.Err())
		return false, ctx.Err()
	})
	require.True(t, round.TimedOut)
	calls.Wait()
	for i := range masters {
		assert.True(t, c.health[i].FailedLast(), "master %d: a call past the round's deadline was not counted as no reply", i)
	}
}

// stallUntilDone is a master whose SET waits until its context ends and
// then fails with the context's error, as go-redis does while it waits for
// a connection.
type stallUntilDone struct{ full }

func (m stallUntilDone) SetNX(ctx context.Context, _, _ string, _ time.Duration) (bool, error) {
	<-ctx.Done()
	return false, ctx.Err()
}

// TestCallerCancelNoVote: a call that the caller's cancellation ended is not
// told to the observer as the master's vote, and leaves the master's
// health alone; the twin, a call that the round's deadline ended, is a
// timeout vote and a failure.
func TestCallerCancelNoVote(t *testing.T) {
	for _, cancelled := range []bool{true, false} {
		t.Run(map[bool]string{true: "caller cancelled", false: "round deadline"}[cancelled], func(t *testing.T) {
			_, masters := miniMasters(t, 3)
			masters[2] = stallUntilDone{masters[2].(full)}
			obs := newLockLog()
			c := newTestClient(t, masters, WithHooks(hooksOf(obs)), WithNodeTimeout(time.Second))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			l, err := c.TryLock(ctx, resourceName(t), time.Minute)
			require.NoError(t, err, "two masters of three")
			if cancelled {
				cancel() // the stalled call is still running: the round returned at the majority
			}
			require.Eventually(t, func() bool {
				if c.health[2].Inflight() != 0 {
					return false
				}
				// The vote is told after the call's bookkeeping ends.
				obs.mu.Lock()
				defer obs.mu.Unlock()
				return cancelled || len(obs.votes[c.addrs[2]]) > 0
			}, 5*time.Second, time.Millisecond)
			_, votes, _ := obs.take()
			if cancelled {
				assert.Empty(t, votes[c.addrs[2]], "the caller's cancellation told as the master's vote")
				assert.False(t, c.health[2].FailedLast(), "the caller's cancellation counted as the master's failure")
			} else {
				assert.Equal(t, []string{"timeout"}, votes[c.addrs[2]])
				assert.True(t, c.health[2].FailedLast(), "a call past the round's deadline not counted")
			}
			require.NoError(t, l.Unlock(context.Background()))
		})
	}
}
