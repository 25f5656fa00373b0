package fair

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type lock struct{ name string }

// waiters makes n waiters on key, stamped 10, 20, ... µs, with a count of
// their nudges.
func waiters(n int, key string) ([]*Waiter[*lock], []int) {
	nudges := make([]int, n)
	ws := make([]*Waiter[*lock], n)
	for i := range ws {
		at := int64(10 * (i + 1))
		ws[i] = NewWaiter[*lock](string(rune('a'+i)), at, key, time.Second, func() { nudges[i]++ })
	}
	return ws, nudges
}

// TestPickInLineOrder: a release picks the first waiter in id order that no
// other release is handing a lock to, whatever the order they were listed in.
func TestPickInLineOrder(t *testing.T) {
	var f Line[*lock]
	ws, _ := waiters(3, "k")
	f.List(ws[2])
	f.List(ws[0])
	f.List(ws[1])
	assert.True(t, f.WaitedOn("k"))
	assert.False(t, f.WaitedOn("other"))

	w, _, never := f.Pick("k")
	require.Same(t, ws[0], w)
	assert.True(t, never, "a waiter that never attempted has no entry on the masters")
	w2, _, _ := f.Pick("k")
	require.Same(t, ws[1], w2, "a second release skips the waiter being handed a lock")
	f.Withdraw(w2)

	require.True(t, f.Deliver(w, &lock{"l1"}, false, func() { t.Fatal("stale for a lock not passed") }))
	w3, _, _ := f.Pick("k")
	assert.Same(t, ws[1], w3, "a waiter with a lock in its grant is not picked again")
}

// TestCoveredByView: a waiter is covered (a pass may reach it in-process)
// only when a view taken after it arrived shows every other client's
// waiter behind it.
func TestCoveredByView(t *testing.T) {
	var f Line[*lock]
	ws, _ := waiters(2, "k")
	for _, w := range ws {
		f.List(w)
	}
	require.True(t, f.Attempting(ws[1], true, false))
	ws[1].started = 100 // the attempt began after both arrived
	require.True(t, f.Attempting(ws[1], false, false))

	f.Observe(ws[1], 15) // another client's waiter arrived at 15
	_, covered, _ := f.Pick("k")
	assert.True(t, covered, "the waiter stamped 10 is ahead of the foreign one at 15")
	f.Withdraw(ws[0])

	f.Observe(ws[1], 5) // a view as new that shows a foreign waiter at 5
	w, covered, _ := f.Pick("k")
	require.Same(t, ws[0], w)
	assert.False(t, covered, "a foreign waiter stamped 5 is ahead of ours at 10")
	f.Withdraw(w)

	ok := f.Inspect("k", func(st []State) bool {
		return len(st) == 2 && !st[0].Covered && st[0].Never && st[1].Attempts == 1 && !st[1].Never
	})
	assert.True(t, ok)
}

// TestAttemptingYieldsToGrant: a waiter with a lock in its grant starts no
// attempt (it would put its entry back on the masters after the pass).
func TestAttemptingYieldsToGrant(t *testing.T) {
	var f Line[*lock]
	ws, _ := waiters(1, "k")
	f.List(ws[0])
	w, _, _ := f.Pick("k")
	require.True(t, f.Deliver(w, &lock{"l"}, true, func() { t.Fatal("stale for a waiter with no entry") }))
	assert.False(t, f.Attempting(ws[0], true, false))
	assert.Equal(t, "l", (<-ws[0].Grant).name)
}

// TestDeliverStaleEntry: a lock passed in-process to a waiter that has an
// entry on the masters carries that entry for its release to remove.
func TestDeliverStaleEntry(t *testing.T) {
	var f Line[*lock]
	ws, _ := waiters(1, "k")
	f.List(ws[0])
	require.True(t, f.Attempting(ws[0], true, false))
	require.True(t, f.Attempting(ws[0], false, false))
	w, _, never := f.Pick("k")
	assert.False(t, never)
	stale := 0
	require.True(t, f.Deliver(w, &lock{"l"}, true, func() { stale++ }))
	assert.Equal(t, 1, stale)
	assert.False(t, f.Raced(w), "no attempt ran during the handoff")
}

// TestUnlistReturnsUntakenLock: a waiter that leaves with a lock in its
// grant gives it back to be freed; the one it returns with is not.
func TestUnlistReturnsUntakenLock(t *testing.T) {
	var f Line[*lock]
	ws, nudges := waiters(2, "k")
	f.List(ws[0])
	f.List(ws[1])
	w, _, _ := f.Pick("k")
	l := &lock{"l"}
	require.True(t, f.Deliver(w, l, false, nil))
	assert.Same(t, l, f.Unlist(ws[0], nil), "the lock in the grant, not taken")
	assert.Positive(t, nudges[1], "the next waiter was not nudged when the first left")

	w, _, _ = f.Pick("k")
	require.Same(t, ws[1], w)
	l2 := &lock{"l2"}
	require.True(t, f.Deliver(w, l2, false, nil))
	assert.Nil(t, f.Unlist(ws[1], <-ws[1].Grant), "the lock it returns with")
	assert.False(t, f.Deliver(ws[1], &lock{"late"}, false, nil), "a waiter that left takes nothing")
}

// TestAwaitTurn: the first wait ends with a lock passed, at the nudge of a
// waiter that will not be passed one, at the refresh, or with ctx.
func TestAwaitTurn(t *testing.T) {
	var f Line[*lock]
	ws, _ := waiters(1, "k")
	w := ws[0]
	f.List(w)
	wake := make(chan struct{}, 1)

	w.Grant <- &lock{"passed"}
	l, ok, err := f.AwaitTurn(context.Background(), w, wake, time.Hour)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, "passed", l.name)

	wake <- struct{}{} // nudged, not covered: attempt
	_, ok, err = f.AwaitTurn(context.Background(), w, wake, time.Hour)
	require.NoError(t, err)
	assert.False(t, ok)

	_, ok, err = f.AwaitTurn(context.Background(), w, wake, time.Millisecond)
	require.NoError(t, err)
	assert.False(t, ok, "the refresh")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err = f.AwaitTurn(ctx, w, wake, time.Hour)
	assert.ErrorIs(t, err, context.Canceled)
}

// TestListedAloneIsNextInLine: a waiter that saw others of its client
// queued but is listed after they left has nobody to line it up: it is
// nudged to make its first attempt at once, and a waiter listed behind it
// is not. Without the nudge it sat out the holder's section with no entry
// on the masters, and the release that followed had none to hand the key
// to (TestMixedDeploymentStarvesPlainClient lost its starvation so).
func TestListedAloneIsNextInLine(t *testing.T) {
	var f Line[*lock]
	ws, nudges := waiters(2, "k")
	f.List(ws[0])
	assert.Equal(t, []int{1, 0}, nudges, "the first waiter listed on an empty line is nudged")
	f.List(ws[1])
	assert.Equal(t, []int{1, 0}, nudges, "a waiter listed behind another is left to the line")

	// Listed again after an attempt (its entry is on the masters): no nudge.
	var g Line[*lock]
	vs, vn := waiters(1, "k")
	require.True(t, g.Attempting(vs[0], true, false))
	require.True(t, g.Attempting(vs[0], false, false))
	g.List(vs[0])
	assert.Equal(t, []int{0}, vn)
}

// TestClaims: a waiter claims the key only when it is the only one of its
// client listed on it and a recent view showed another client's waiter
// queued; the view outlives the line, so the next Lock call on the key (a
// new waiter) claims it too.
func TestClaims(t *testing.T) {
	var f Line[*lock]
	now := time.Now().UnixMicro()
	ws, _ := waiters(2, "k")
	f.List(ws[0])
	assert.False(t, f.Claims(ws[0]), "no view yet")
	ws[0].started = now
	f.Observe(ws[0], NoForeign)
	assert.False(t, f.Claims(ws[0]), "no other client's waiter queued")
	ws[0].started = now + 1
	f.Observe(ws[0], now-5) // another client's waiter, queued earlier
	assert.True(t, f.Claims(ws[0]))
	f.List(ws[1])
	assert.False(t, f.Claims(ws[0]), "another waiter of ours listed: a pass may reach it")
	f.Unlist(ws[1], nil)
	f.Unlist(ws[0], nil)

	next := NewWaiter[*lock]("z", now+10, "k", time.Second, func() {})
	assert.True(t, f.Claims(next), "the view was dropped with the line")

	var g Line[*lock]
	old := NewWaiter[*lock]("y", 1, "k", time.Second, func() {})
	g.List(old)
	old.started = now - claimsFor.Microseconds() - 1
	g.Observe(old, 0)
	assert.False(t, g.Claims(old), "a view older than claimsFor counted")
}

// TestClaimAndPickExclude: whether a waiter claims the key and whether a
// releaser may pass it the lock in-process are decided under one mutex.
// A waiter picked by a releaser claims nothing (the pick may pass it the
// lock, and a claim left on the masters would have a later release hand
// the key to a waiter that is gone); a waiter that claimed is never
// covered for a pass. Before, Claims and the releaser's read of Claimed
// raced: a pass could reach a waiter whose attempt then wrote its claim.
func TestClaimAndPickExclude(t *testing.T) {
	now := time.Now().UnixMicro()
	setup := func() (*Line[*lock], *Waiter[*lock]) {
		f := &Line[*lock]{}
		ws, _ := waiters(1, "k")
		w := ws[0]
		f.List(w)
		w.started = now + 1
		f.Observe(w, now-5) // another client's waiter queued earlier: w would claim
		return f, w
	}

	f, w := setup()
	picked, _, _ := f.Pick("k")
	require.Equal(t, w, picked)
	assert.False(t, f.Claims(w), "a picked waiter claimed the key")
	assert.False(t, w.Claimed.Load())
	f.Unpick(w)
	assert.True(t, f.Claims(w), "once the pick ended, the waiter claims")

	f, w = setup()
	require.True(t, f.Claims(w))
	assert.True(t, w.Claimed.Load(), "Claims marks the waiter under the mutex")
	picked, covered, _ := f.Pick("k")
	require.Equal(t, w, picked)
	assert.False(t, covered, "a waiter that claimed was offered an in-process pass")
}
