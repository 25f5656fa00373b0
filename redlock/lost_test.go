package redlock

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/driver"
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

// lostPassRig is a fair client whose waiters poll, a holder H, and two
// waiters A and B of the same client: H's Unlock has passed the lock to A
// in-process, and B, covered by A's attempts and with no entry on the
// masters, waits for A's Unlock to pass it on; B asks for bTTL.
type lostPassRig struct {
	c     *Client
	res   string
	h, a  *Lock
	b     <-chan lockResult
	other *Client
	admin []*redis.Client
}

func newLostPassRig(ctx context.Context, t *testing.T, bTTL time.Duration) lostPassRig {
	t.Helper()
	masters, admin := waitMasters(t, 3)
	masters = polling(masters)
	res := resourceName(t)
	c := fairClient(t, masters, 3*time.Second)
	h := heldFor(ctx, t, c, admin, res)
	aRes := lockAsync(ctx, c, res, time.Minute)
	listedHere(t, c, res, func(ws []*queued) bool { return len(ws) == 1 && ws[0].attempts > 0 })
	b := lockAsync(ctx, c, res, bTTL)
	// A polls while H holds: an attempt of A's that starts after B arrived
	// covers B, which then waits here for the lock to be passed on.
	listedHere(t, c, res, func(ws []*queued) bool {
		return len(ws) == 2 && lazyLocked(ws[1]) && c.coveredLocked(ws[1])
	})
	require.NoError(t, h.Unlock(ctx))
	a := <-aRes
	require.NoError(t, a.err)
	require.Equal(t, uint64(1), c.passed.Load(), "H's Unlock did not pass the lock to A in-process")
	require.Equal(t, h.Token(), a.l.Token())
	other := newTestClient(t, masters, WithNodeTimeout(250*time.Millisecond))
	return lostPassRig{c: c, res: res, h: h, a: a.l, b: b, other: other, admin: admin}
}

// notPassed checks that B did not get the lock while the other client holds
// it (two holders), then that B gets it with a token of its own once the
// other client unlocks.
func (r lostPassRig) notPassed(ctx context.Context, t *testing.T, ol *Lock) {
	t.Helper()
	select {
	case got := <-r.b:
		if got.err == nil {
			t.Fatalf("B got the lock (token %s, until in %v) while another client holds it with token %s: two holders",
				got.l.Token(), time.Until(got.l.Until()).Round(time.Second), ol.Token())
		}
		t.Fatalf("B's Lock failed: %v", got.err)
	case <-time.After(500 * time.Millisecond):
	}
	assert.Equal(t, uint64(1), r.c.passed.Load(), "a lock that ended was passed on")
	require.NoError(t, ol.Unlock(ctx))
	got := <-r.b
	require.NoError(t, got.err)
	assert.NotEqual(t, r.a.Token(), got.l.Token(), "B holds A's dead lock")
	require.NoError(t, got.l.Unlock(ctx))
}

// TestLostLockNotPassedOn: A's lock, passed on in-process, ends because
// its Extend failed (its context had ended), which releases its keys;
// another client then takes the lock. A's Unlock must not pass A's dead
// lock on to B: it reports ErrLockNotHeld, and B waits for the other
// client like any waiter.
func TestLostLockNotPassedOn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := newLostPassRig(ctx, t, time.Minute)

	ended, stop := context.WithCancel(ctx)
	stop()
	require.Error(t, r.a.Extend(ended, time.Minute))
	assertClosed(t, r.a.Done(), "a failed Extend did not end the lock")
	ol, err := r.other.TryLock(ctx, r.res, time.Minute)
	require.NoError(t, err, "the failed Extend left A's keys on the masters")

	assert.ErrorIs(t, r.a.Unlock(ctx), ErrLockNotHeld, "Unlock of a lock lost by its Extend")
	r.notPassed(ctx, t, ol)
}

// TestLostLockNotPassedOnByRenewer: the renewer of Renew ends A's lock (no
// progress) and unlocks it: the lock is not passed on to B, which takes it
// in a round of its own, with a token of its own.
func TestLostLockNotPassedOnByRenewer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The renewer ends A's lock with a third of A's 9 s lease left (3 s),
	// enough to pass it on as it is to B, which asks for 3 s (a lease of
	// 3 s is passed on with three quarters of it left).
	r := newLostPassRig(ctx, t, 3*time.Second)
	require.NoError(t, r.a.Extend(ctx, 9*time.Second))
	require.NoError(t, r.a.Renew(9*time.Second, time.Minute))
	var got lockResult
	select {
	case got = <-r.b:
	case <-time.After(10 * time.Second):
		t.Fatal("B did not get the lock after the renewer ended A's")
	}
	require.NoError(t, got.err)
	assertClosed(t, r.a.Done(), "the renewer did not end A's lock")
	assert.ErrorIs(t, context.Cause(r.a.Context()), ErrNoProgress)
	assert.NotEqual(t, r.a.Token(), got.l.Token(), "the renewer's Unlock passed A's lost lock on to B")
	assert.Equal(t, uint64(1), r.c.passed.Load(), "a lock that ended was passed on")
	heldEverywhere(t, r.admin, r.res, got.l)
	_, err := r.other.TryLock(ctx, r.res, time.Minute)
	assert.ErrorIs(t, err, ErrNotAcquired, "another client took the lock B holds")
	assert.ErrorIs(t, r.a.Unlock(ctx), ErrLockNotHeld)
	require.NoError(t, got.l.Unlock(ctx))
}

// lostHandoffReply runs the first direct handoff (release.lua with a
// waiter's id) it is sent and then loses its reply, as a timeout after the
// script ran would.
type lostHandoffReply struct {
	full
	lost atomic.Bool
}

func (m *lostHandoffReply) Eval(ctx context.Context, s *driver.Script, keys []string, args ...any) (any, error) {
	v, err := m.full.Eval(ctx, s, keys, args...)
	if s != releaseScript || len(args) < 4 || args[1] == "" || err != nil || !m.lost.CompareAndSwap(false, true) {
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
	c := fairClient(t, conns(lossy), DefaultFairEntryTTL)
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
	assert.Zero(t, c.handed.Load(), "a handoff that no master counted was delivered")
	heldEverywhere(t, admin, res, w.l)
	require.NoError(t, w.l.Unlock(ctx))
}
