package redlock

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/driver"
	"quorumlock.dev/redlock/internal/fair"
)

// noPush hides a master's Subscribe: its waiters poll.
type noPush struct{ Master }

func polling(masters []Master) []Master {
	out := make([]Master, len(masters))
	for i, m := range masters {
		out[i] = noPush{m}
	}
	return out
}

// lostHandoffReply runs the first direct handoff (handoff.lua with a
// waiter's id) it is sent and then loses its reply, as a timeout after the
// script ran would.
type lostHandoffReply struct {
	full
	lost atomic.Bool
}

func (m *lostHandoffReply) Eval(ctx context.Context, s *driver.Script, keys []string, args ...any) (any, error) {
	v, err := m.full.Eval(ctx, s, keys, args...)
	if s != fair.HandoffScript || len(args) < 4 || args[1] == "" || err != nil || !m.lost.CompareAndSwap(false, true) {
		return v, err
	}
	return nil, errors.New("read tcp: i/o timeout (the reply to the handoff was lost)")
}

// TestHandoffUncountedKeysReleased: a direct handoff whose every handed
// master is not counted (here the one master's reply is lost after its
// script set the waiter's new key) leaves that key to nobody: it is
// released at once and the waiter woken, which takes the lock in a round of
// its own instead of waiting out the orphan key's TTL of a minute.
func TestHandoffUncountedKeysReleased(t *testing.T) {
	masters, admin := waitMasters(t, 1)
	lossy := &lostHandoffReply{full: masters[0].(full)}
	res := resourceName(t)
	c := fairClient(t, conns(lossy), defaultFairEntryTTL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	holder, waiting := heldWithWaiter(ctx, t, c, admin, &res)
	released := time.Now()
	err := holder.Unlock(ctx)
	require.True(t, lossy.lost.Load(), "the release was not a direct handoff")
	assert.ErrorIs(t, err, ErrQuorumUnavailable, "Unlock whose release reply was lost")
	var w lockResult
	select {
	case w = <-waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter is still waiting 10 s after the release: the handed key was orphaned")
	}
	require.NoError(t, w.err)
	t.Logf("the waiter took the lock %v after the release", w.at.Sub(released))
	assert.Zero(t, fairOf(c).Handed(), "a handoff that no master counted was delivered")
	heldEverywhere(t, admin, res, w.l)
	require.NoError(t, w.l.Unlock(ctx))
}
