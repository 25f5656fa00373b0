package redlock

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// idleAfterOutage is a client of three masters 5 ms away whose calls all
// failed a second ago and none since: every master is out of its breaker
// until a probe gets a reply. The masters answer again. Call it inside
// the bubble.
func idleAfterOutage(t *testing.T) *Client {
	t.Helper()
	servers, masters := memMasters(3)
	slow := make([]Master, len(masters))
	for i, m := range masters {
		slow[i] = slowConn{m.(full), 5 * time.Millisecond}
	}
	c := virtualClient(t, slow)
	for _, s := range servers {
		s.Fail(errors.New("connection refused"))
	}
	_, err := c.TryLock(context.Background(), "a", 100*time.Millisecond)
	require.ErrorIs(t, err, ErrQuorumUnavailable)
	// Idle past the breaker's quiet time; the lost attempt's release
	// retries end with its key's TTL.
	time.Sleep(time.Second)
	for _, s := range servers {
		s.Fail(nil)
	}
	return c
}

// TestCallAfterOutageWaitsForProbe: a client idle through an outage of
// every master finds them all out of its breaker when it calls again. The
// first round probes them; a second round begun a millisecond later, while
// the probes are in flight, waits for them (they get replies) instead of
// failing at once as an outage of masters that answer. The simulator found
// it: a client's machine suspended, then two of its workers locking
// together when it woke.
func TestCallAfterOutageWaitsForProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := idleAfterOutage(t)
		ctx := context.Background()
		first := lockAsync(ctx, c, "a", time.Minute)
		time.Sleep(time.Millisecond)
		l, err := c.TryLock(ctx, "b", time.Minute)
		require.NoError(t, err, "the round begun while the breaker's probes were in flight")
		require.NoError(t, l.Unlock(ctx))
		r := <-first
		require.NoError(t, r.err)
		require.NoError(t, r.l.Unlock(ctx))
	})
}

// TestProbeEndedByCallerLeavesNextProbe: when the call that took the
// breaker's probe is ended by its caller's context (an Extend whose
// holder gave up, a TryLock in a hurry), the probe told nothing of the
// master, and the next round probes again at once instead of skipping
// the masters for a node timeout (found by the simulator: a holder's
// Extend ended by its context, then a false outage of its client's next
// attempt).
func TestProbeEndedByCallerLeavesNextProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := idleAfterOutage(t)
		ctx := context.Background()
		hurry, cancel := context.WithTimeout(ctx, time.Millisecond)
		defer cancel()
		_, err := c.TryLock(hurry, "a", time.Minute)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		time.Sleep(10 * time.Millisecond) // the probes' calls have returned
		l, err := c.TryLock(ctx, "b", time.Minute)
		require.NoError(t, err, "the round after a probe its caller ended")
		require.NoError(t, l.Unlock(ctx))
	})
}
