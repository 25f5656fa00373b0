package quorum

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestUndo checks that undo runs once per node, at once for calls that have
// returned and only after the call for the others, in the order the calls and
// undos record on one sequence. The blocked calls outlive their round, whose
// timeout is short: Undo waits for them until the round's deadline only.
func TestUndo(t *testing.T) {
	A, R, F, B := Agreed, Refused, Failed, blocked
	tests := []struct {
		name    string
		need    int
		timeout time.Duration
		s       script
	}{
		{"lost round, two calls running", 3, short, script{R, R, F, B, B}},
		{"won round, two calls running", 3, short, script{B, A, A, B, A}},
		{"timed out round", 3, short, script{A, B, B}},
		{"every call returned", 3, long, script{A, A, A}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := len(tt.s)
			g := newGate(t)
			var (
				seq        atomic.Int64
				returnedAt = make([]atomic.Int64, n)
				undoneAt   = make([]atomic.Int64, n)
				undone     = make([]atomic.Int32, n)
			)
			call := func(_ context.Context, node int) (bool, error) {
				defer returnedAt[node].Store(seq.Add(1))
				return tt.s.answer(g, node)
			}
			undo := func(_ context.Context, node int) {
				undoneAt[node].Store(seq.Add(1))
				// Take a little time, so that an Undo that did not wait for
				// its undos would be seen returning before they finish.
				time.Sleep(time.Millisecond)
				undone[node].Add(1)
			}

			var r *Round
			require.True(t, returnsWithin(prompt, func() {
				r = Group{Nodes: n, Need: tt.need, Timeout: tt.timeout}.Do(context.Background(), call)
			}), "Do did not return")
			require.True(t, returnsWithin(prompt, func() { r.Undo(context.Background(), long, undo) }), "Undo did not return")

			for i := range n {
				if r.Answer(i) != Pending {
					assert.Equal(t, int32(1), undone[i].Load(), "node %d answered, its undo has not run", i)
				}
				if tt.s[i] == blocked {
					assert.Zero(t, undone[i].Load(), "node %d undone while its call runs", i)
				}
			}

			g.open()
			require.True(t, returnsWithin(prompt, r.WaitUndone), "WaitUndone did not return")
			for i := range n {
				assert.Equal(t, int32(1), undone[i].Load(), "undos of node %d", i)
				assert.Greater(t, undoneAt[i].Load(), returnedAt[i].Load(), "node %d undone before its call returned", i)
			}
		})
	}
}

// undoRecorder is an undo that records, per node, whether it ran and whether
// it ran only after the node's call had returned. It touches no *testing.T,
// so an undo that outlives its test is harmless.
type undoRecorder struct {
	returned []atomic.Bool  // set by the call, just before it returns
	early    []atomic.Bool  // the undo ran while the call was running
	undone   []atomic.Int32 // how many times the undo finished
}

func newUndoRecorder(n int) *undoRecorder {
	return &undoRecorder{
		returned: make([]atomic.Bool, n),
		early:    make([]atomic.Bool, n),
		undone:   make([]atomic.Int32, n),
	}
}

// call wraps s so that the recorder knows when each call returns.
func (u *undoRecorder) call(s script, g *gate) Call {
	return func(_ context.Context, node int) (bool, error) {
		defer u.returned[node].Store(true)
		return s.answer(g, node)
	}
}

// undo returns an undo that runs f (if set) for the node before it records
// the node as undone.
func (u *undoRecorder) undo(f func(node int)) func(context.Context, int) {
	return func(_ context.Context, node int) {
		if !u.returned[node].Load() {
			u.early[node].Store(true)
		}
		if f != nil {
			f(node)
		}
		u.undone[node].Add(1)
	}
}

// snapshot is how many times each node's undo has finished.
func (u *undoRecorder) snapshot() []int32 {
	s := make([]int32, len(u.undone))
	for i := range u.undone {
		s[i] = u.undone[i].Load()
	}
	return s
}

// assertAllUndone checks, once every undo has finished, that each node was
// undone once and only after its call had returned.
func (u *undoRecorder) assertAllUndone(t *testing.T) {
	t.Helper()
	for i := range u.undone {
		assert.Equal(t, int32(1), u.undone[i].Load(), "undos of node %d", i)
		assert.False(t, u.early[i].Load(), "node %d undone before its call returned", i)
	}
}

// ones is what a snapshot shows when every one of n undos has finished once.
func ones(n int) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = 1
	}
	return s
}

// TestUndoWaitsForResponsiveCalls: calls still running when Do returned but
// returning before the round's deadline are responsive, and Undo waits for
// their undos too, also for one that finishes after the deadline.
func TestUndoWaitsForResponsiveCalls(t *testing.T) {
	tests := []struct {
		name    string
		timeout time.Duration // the round's
		// lateUndo makes node 1's undo finish only after the round's
		// deadline, though its call returned well before it.
		lateUndo bool
	}{
		{"undos finish at once", long, false},
		{"an undo finishes after the round's deadline", brief, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Node 0 decides the round; nodes 1 and 2 block until Undo has
			// begun, then return long before the round's deadline.
			s := script{Agreed, blocked, blocked}
			n := len(s)
			g := newGate(t)
			u := newUndoRecorder(n)
			r := Group{Nodes: n, Need: 1, Timeout: tt.timeout}.Do(context.Background(), u.call(s, g))
			afterDo := time.Now() // no earlier than the start of Do
			require.Equal(t, counts{Agreed: 1, Pending: 2}, countsOf(r))

			undoBegun := make(chan struct{})
			undo := u.undo(func(node int) {
				switch {
				case node == 0:
					close(undoBegun)
				case node == 1 && tt.lateUndo:
					time.Sleep(time.Until(afterDo.Add(tt.timeout + short)))
				default:
					// Take a little time, so that an Undo that did not wait
					// for this undo would be seen returning before it ends.
					time.Sleep(time.Millisecond)
				}
			})
			var atReturn []int32
			undoReturned := make(chan struct{})
			go func() {
				defer close(undoReturned)
				r.Undo(context.Background(), long, undo)
				atReturn = u.snapshot()
			}()

			// Node 0's undo runs once Undo has taken over the round: from
			// then on, a call that returns has its undo started by Undo.
			require.True(t, returnsWithin(prompt, func() { <-undoBegun }), "Undo did not undo node 0")
			g.open()
			require.True(t, returnsWithin(prompt, func() { <-undoReturned }), "Undo did not return")
			assert.Equal(t, ones(n), atReturn, "Undo returned before the undos of calls that returned before the round's deadline")

			require.True(t, returnsWithin(prompt, r.WaitUndone), "WaitUndone did not return")
			u.assertAllUndone(t)
		})
	}
}

// TestUndoDoesNotWaitPastDeadline: a call still blocked at the round's
// deadline has outlived the round; Undo returns at about that deadline
// without its undo, and the undo runs once the call returns.
func TestUndoDoesNotWaitPastDeadline(t *testing.T) {
	// Refusals lose the round at once; node 0 agreed, and node 3 may have.
	s := script{Agreed, Refused, Refused, blocked}
	n := len(s)
	g := newGate(t)
	u := newUndoRecorder(n)
	start := time.Now()
	r := Group{Nodes: n, Need: Majority(n), Timeout: brief}.Do(context.Background(), u.call(s, g))
	require.Equal(t, Pending, r.Answer(3))

	var atReturn []int32
	require.True(t, returnsWithin(prompt, func() {
		r.Undo(context.Background(), long, u.undo(nil))
		atReturn = u.snapshot()
	}), "Undo waited for a call that outlived the round")
	elapsed := time.Since(start)
	// Until the deadline, node 3's call could still have returned in time.
	assert.GreaterOrEqual(t, elapsed, brief, "Undo returned before the round's deadline")
	assert.Less(t, elapsed, brief+overrun, "Undo overran the round's deadline")
	want := ones(n)
	want[3] = 0
	assert.Equal(t, want, atReturn, "undos done when Undo returned")

	g.open()
	require.True(t, returnsWithin(prompt, r.WaitUndone), "WaitUndone did not wait for, or never ran, the undo of the late call")
	u.assertAllUndone(t)
}

// TestUndoLateCallDoesNotReleaseUndo: a call that outlives the round and then
// returns must not stand in for a responsive node whose undo is still
// running. Undo waits for node 0's undo (its timeout is long) however many
// undos of late calls finish meanwhile.
func TestUndoLateCallDoesNotReleaseUndo(t *testing.T) {
	s := script{Agreed, blocked}
	n := len(s)
	calls, undos := newGate(t), newGate(t)
	u := newUndoRecorder(n)
	r := Group{Nodes: n, Need: 1, Timeout: brief}.Do(context.Background(), u.call(s, calls))
	afterDo := time.Now() // no earlier than the start of Do
	require.Equal(t, counts{Agreed: 1, Pending: 1}, countsOf(r))

	lateUndone := make(chan struct{})
	undo := u.undo(func(node int) {
		if node == 0 {
			<-undos.ch
			return
		}
		close(lateUndone)
	})
	var atReturn []int32
	undoReturned := make(chan struct{})
	go func() {
		defer close(undoReturned)
		r.Undo(context.Background(), long, undo)
		atReturn = u.snapshot()
	}()

	// Let the round's deadline pass with a margin, so that node 1's call
	// returns late and Undo no longer waits for it. Had Undo not passed the
	// deadline yet, it would wait for node 1 too and the test pass anyway.
	time.Sleep(time.Until(afterDo.Add(brief + brief/2)))
	calls.open()
	require.True(t, returnsWithin(prompt, func() { <-lateUndone }), "the late call was not undone")
	// A wrong Undo returns now; give it the time to.
	select {
	case <-undoReturned:
	case <-time.After(short):
	}
	undos.open()
	require.True(t, returnsWithin(prompt, func() { <-undoReturned }), "Undo did not return")
	assert.Equal(t, int32(1), atReturn[0], "Undo returned while node 0's undo ran, counting the late node 1's undo in its place")

	require.True(t, returnsWithin(prompt, r.WaitUndone), "WaitUndone did not return")
	u.assertAllUndone(t)
}

// TestUndoTimeout: an undo that blocks holds Undo for about Undo's timeout,
// not longer. Every call has returned when Do returns (need 0 waits for every
// node), so no call can still become responsive.
func TestUndoTimeout(t *testing.T) {
	const n = 3
	s := script{Refused, Refused, Refused}
	r := Group{Nodes: n, Need: 0, Timeout: long}.Do(context.Background(), s.call(nil))
	require.Equal(t, counts{Refused: n}, countsOf(r), "not every call returned")

	g := newGate(t)
	var (
		finished sync.WaitGroup // Done panics if undo runs twice for a node
		undone   = make([]atomic.Int32, n)
	)
	finished.Add(n)
	undo := func(_ context.Context, node int) {
		<-g.ch
		undone[node].Add(1)
		finished.Done()
	}
	start := time.Now()
	r.Undo(context.Background(), short, undo)
	elapsed := time.Since(start)

	assert.GreaterOrEqual(t, elapsed, short, "Undo did not wait for the undos it started")
	assert.Less(t, elapsed, overrun, "Undo overran its timeout")

	g.open()
	require.True(t, returnsWithin(prompt, finished.Wait), "undos did not finish once unblocked")
	require.True(t, returnsWithin(prompt, r.WaitUndone), "WaitUndone did not return")
	for i := range n {
		assert.Equal(t, int32(1), undone[i].Load(), "undos of node %d", i)
	}
}

// TestUndoTimeoutOnceCallsReturned: a call still running when Undo begins
// returns soon after, long before the round's deadline, while another node's
// undo blocks. Once every call has returned, nothing can become responsive
// any more, so the blocked undo holds Undo for Undo's timeout only, not until
// the round's deadline.
func TestUndoTimeoutOnceCallsReturned(t *testing.T) {
	s := script{Agreed, blocked}
	n := len(s)
	calls, undos := newGate(t), newGate(t)
	u := newUndoRecorder(n)
	r := Group{Nodes: n, Need: 1, Timeout: long}.Do(context.Background(), u.call(s, calls))
	require.Equal(t, counts{Agreed: 1, Pending: 1}, countsOf(r))

	undoBegun, lastUndone := make(chan struct{}), make(chan struct{})
	undo := u.undo(func(node int) {
		if node == 0 {
			close(undoBegun)
			<-undos.ch
			return
		}
		close(lastUndone)
	})
	start := time.Now()
	undoReturned := make(chan struct{})
	go func() {
		defer close(undoReturned)
		r.Undo(context.Background(), short, undo)
	}()

	require.True(t, returnsWithin(prompt, func() { <-undoBegun }), "Undo did not undo node 0")
	calls.open()
	require.True(t, returnsWithin(prompt, func() { <-lastUndone }), "node 1 was not undone")
	assert.True(t, returnsWithin(overrun, func() { <-undoReturned }),
		"Undo waited for the round's deadline, though every call had returned and its own timeout had passed")
	assert.GreaterOrEqual(t, time.Since(start), short, "Undo did not wait for the undo it started")

	undos.open()
	require.True(t, returnsWithin(prompt, r.WaitUndone), "WaitUndone did not return")
	u.assertAllUndone(t)
}

// TestUndoUntilStopsWhenEnough: UndoUntil stops waiting once enough says
// so, here when the two calls that had returned are undone; the call still
// running within the round's deadline is undone in the background once it
// returns. Without enough, it would wait for that call.
func TestUndoUntilStopsWhenEnough(t *testing.T) {
	release := make(chan struct{})
	var returnedAt, undoneAt [3]atomic.Int64
	var seq atomic.Int64
	r := Group{Nodes: 3, Need: 2, Timeout: time.Minute}.Do(context.Background(), func(ctx context.Context, node int) (bool, error) {
		if node == 2 {
			<-release
		}
		returnedAt[node].Store(seq.Add(1))
		return true, nil
	})
	require.Equal(t, 2, r.Count(Agreed))
	done := make(chan struct{})
	go func() {
		r.UndoUntil(context.Background(), time.Minute, func(_ context.Context, node int) { undoneAt[node].Store(seq.Add(1)) },
			func() bool { return undoneAt[0].Load() != 0 && undoneAt[1].Load() != 0 })
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("UndoUntil waited for a call still running after enough was true")
	}
	assert.NotZero(t, undoneAt[0].Load())
	assert.NotZero(t, undoneAt[1].Load())
	assert.Zero(t, undoneAt[2].Load(), "undone before its call returned")
	close(release)
	r.WaitUndone()
	assert.Greater(t, undoneAt[2].Load(), returnedAt[2].Load())
}

// TestResultOfLateCall: a call that returns after the round was decided is
// Pending in the round, but its undo can read what it returned.
func TestResultOfLateCall(t *testing.T) {
	g := newGate(t)
	r := Group{Nodes: 3, Need: 2, Timeout: long}.Do(context.Background(), func(_ context.Context, node int) (bool, error) {
		if node == 2 {
			<-g.ch
			return false, nodeError(2)
		}
		return true, nil
	})
	require.Equal(t, counts{Agreed: 2, Pending: 1}, countsOf(r))
	var late error
	undone := make(chan struct{})
	go r.Undo(context.Background(), long, func(_ context.Context, node int) {
		if node == 2 {
			_, late = r.Result(2)
			close(undone)
		}
	})
	g.open()
	require.True(t, returnsWithin(prompt, func() { <-undone }), "node 2 was not undone")
	assert.Equal(t, nodeError(2), late)
	assert.Equal(t, Pending, r.Answer(2), "the round does not count a late result")
	agreed, err := r.Result(0)
	assert.True(t, agreed)
	assert.NoError(t, err)
}

// TestSettled: a settled round counts its answers, reports every call as
// returned, and its undo reaches every node at once.
func TestSettled(t *testing.T) {
	r := Settled([]bool{true, false, true})
	assert.Equal(t, 2, r.Count(Agreed))
	assert.Equal(t, 1, r.Count(Refused))
	assert.Equal(t, Refused, r.Answer(1))
	for i := range 3 {
		agreed, err, ok := r.Returned(i)
		assert.True(t, ok)
		assert.NoError(t, err)
		assert.Equal(t, i != 1, agreed)
	}
	var undone atomic.Int32
	r.Undo(context.Background(), time.Second, func(ctx context.Context, node int) { undone.Add(1) })
	r.WaitUndone()
	assert.Equal(t, int32(3), undone.Load())
}
