package quorum

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	// long is a round or undo timeout that no passing test reaches: a test
	// that sees it reached has waited for something it should not have.
	long = time.Minute
	// prompt bounds how long a test waits for something that should return
	// at once; it is far above any scheduling delay and far below long.
	prompt = 5 * time.Second
	// short is a timeout that tests do wait for.
	short = 50 * time.Millisecond
	// brief is the timeout of a round whose deadline a test waits for:
	// Undo waits until then for calls still running. It leaves calls that
	// answer at once, or that the test releases at once, ample time to count
	// as answered before the deadline.
	brief = 200 * time.Millisecond
	// overrun bounds how far past a timeout or deadline that it waits for Do
	// or Undo may return: far above any scheduling delay, far below long.
	overrun = 2 * time.Second
)

// nodeError is the error a scripted node fails with; it names the node, so a
// test can tell whose error Round.Err returned.
type nodeError int

func (e nodeError) Error() string { return fmt.Sprintf("node %d failed", int(e)) }

// blocked marks a scripted node whose call waits for its gate, ignoring ctx.
const blocked = Pending

// gate holds blocked calls (or undos) until the test opens it. It is opened
// at cleanup at the latest, so nothing it holds outlives its test by long.
type gate struct {
	ch   chan struct{}
	once sync.Once
}

func newGate(t *testing.T) *gate {
	g := &gate{ch: make(chan struct{})}
	t.Cleanup(g.open)
	return g
}

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

// script is what each node answers: Agreed, Refused, Failed, or blocked
// (which agrees once its gate opens).
type script []Answer

func (s script) call(g *gate) Call {
	return func(_ context.Context, node int) (bool, error) {
		return s.answer(g, node)
	}
}

func (s script) answer(g *gate, node int) (bool, error) {
	switch s[node] {
	case Agreed:
		return true, nil
	case Refused:
		return false, nil
	case Failed:
		return false, nodeError(node)
	default:
		<-g.ch
		return true, nil
	}
}

// returnsWithin reports whether f returns within d. If it does not, f is left
// running; the caller must then not touch what f writes.
func returnsWithin(d time.Duration, f func()) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// counts is the tally of a round, for comparing in one assertion.
type counts struct{ Agreed, Refused, Failed, Pending int }

func countsOf(r *Round) counts {
	return counts{r.Count(Agreed), r.Count(Refused), r.Count(Failed), r.Count(Pending)}
}

// tally counts r's per-node answers, which must agree with its counts.
func tally(r *Round) counts {
	var c counts
	for i := range r.Nodes() {
		switch r.Answer(i) {
		case Agreed:
			c.Agreed++
		case Refused:
			c.Refused++
		case Failed:
			c.Failed++
		case Pending:
			c.Pending++
		}
	}
	return c
}

// assertEnded checks how r reports the way it ended: TimedOut; Err for
// every node (nil for an answer, the node's own error for a failure, pending
// for a Pending node); and Unanswered, which counts the Pending nodes exactly
// when they have an error, that is when the round timed out or the context
// ended it, not when it was decided without them.
func assertEnded(t assert.TestingT, r *Round, timedOut bool, pending error) {
	assert.Equal(t, timedOut, r.TimedOut, "TimedOut")
	for i := range r.Nodes() {
		switch r.Answer(i) {
		case Agreed, Refused:
			assert.NoError(t, r.Err(i), "node %d", i)
		case Failed:
			assert.Equal(t, nodeError(i), r.Err(i), "node %d", i)
		case Pending:
			assert.Equal(t, pending, r.Err(i), "node %d is pending", i)
		}
	}
	unanswered := r.Count(Failed)
	if pending != nil {
		unanswered += r.Count(Pending)
	}
	assert.Equal(t, unanswered, r.Unanswered(), "Unanswered of %+v", countsOf(r))
}

func TestMajority(t *testing.T) {
	tests := []struct{ n, want int }{
		{1, 1}, {2, 2}, {3, 2}, {4, 3}, {5, 3}, {6, 4}, {7, 4}, {8, 5}, {9, 5},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("n=%d", tt.n), func(t *testing.T) {
			assert.Equal(t, tt.want, Majority(tt.n))
		})
	}
}

// TestDoSplits runs every split of agreeing, refusing and failing nodes, all
// answering at once. Do may decide before every answer is in, so an answer
// may be missing (Pending, with no error: the round did not wait for it);
// everything else is exact.
func TestDoSplits(t *testing.T) {
	for _, n := range []int{1, 3, 5, 7} {
		need := Majority(n)
		for agreed := 0; agreed <= n; agreed++ {
			for refused := 0; agreed+refused <= n; refused++ {
				failed := n - agreed - refused
				name := fmt.Sprintf("n=%d/agreed=%d,refused=%d,failed=%d", n, agreed, refused, failed)
				t.Run(name, func(t *testing.T) {
					s := make(script, 0, n)
					for range agreed {
						s = append(s, Agreed)
					}
					for range refused {
						s = append(s, Refused)
					}
					for range failed {
						s = append(s, Failed)
					}
					// Vary which node gives which answer, reproducibly.
					rand.New(rand.NewPCG(uint64(n), uint64(agreed<<8|refused))).Shuffle(n, func(i, j int) {
						s[i], s[j] = s[j], s[i]
					})

					var r *Round
					require.True(t, returnsWithin(prompt, func() {
						r = Group{Nodes: n, Need: need, Timeout: long}.Do(context.Background(), s.call(nil))
					}), "Do did not return")

					require.Equal(t, n, r.Nodes())
					assert.Equal(t, agreed >= need, r.Count(Agreed) >= need, "decision")
					if agreed < need {
						assert.Greater(t, r.Count(Refused)+r.Count(Failed), n-need, "Do returned before need became unreachable")
					}
					assert.Equal(t, tally(r), countsOf(r))
					assert.Equal(t, n, r.Count(Agreed)+r.Count(Refused)+r.Count(Failed)+r.Count(Pending))
					assert.LessOrEqual(t, r.Count(Agreed), agreed)
					assert.LessOrEqual(t, r.Count(Refused), refused)
					assert.LessOrEqual(t, r.Count(Failed), failed)
					for i := range n {
						if got := r.Answer(i); got != Pending {
							assert.Equal(t, s[i], got, "node %d", i)
						}
					}
					assertEnded(t, r, false, nil)
				})
			}
		}
	}
}

// TestDoReturnsOnceDecided gives each round just enough fast answers to decide
// it; the other nodes block until Do has returned, so they are Pending and
// every count is exact. The round was decided, not timed out, so the blocked
// nodes have no error and are not unanswered.
func TestDoReturnsOnceDecided(t *testing.T) {
	A, R, F, B := Agreed, Refused, Failed, blocked
	tests := []struct {
		name string
		need int
		s    script
		want counts
	}{
		{"one node agrees", 1, script{A}, counts{Agreed: 1}},
		{"one node refuses", 1, script{R}, counts{Refused: 1}},
		{"one node fails", 1, script{F}, counts{Failed: 1}},
		{"need 2 of 2, one refuses", 2, script{B, R}, counts{Refused: 1, Pending: 1}},
		{"majority of 3 agrees", 2, script{A, B, A}, counts{Agreed: 2, Pending: 1}},
		{"majority of 3 unreachable", 2, script{F, R, B}, counts{Refused: 1, Failed: 1, Pending: 1}},
		{"majority of 5 agrees, 2 blocked", 3, script{A, A, A, B, B}, counts{Agreed: 3, Pending: 2}},
		{"majority of 5 agrees, blocked first", 3, script{B, B, A, A, A}, counts{Agreed: 3, Pending: 2}},
		{"majority of 5 fails, 2 blocked", 3, script{F, F, F, B, B}, counts{Failed: 3, Pending: 2}},
		{"majority of 5 unreachable by refusals and failures", 3, script{R, B, F, B, R}, counts{Refused: 2, Failed: 1, Pending: 2}},
		{"majority of 7 agrees", 4, script{B, A, B, A, B, A, A}, counts{Agreed: 4, Pending: 3}},
		{"majority of 7 unreachable", 4, script{R, R, F, F, B, B, B}, counts{Refused: 2, Failed: 2, Pending: 3}},
		{"need 1 of 7", 1, script{B, B, B, A, B, B, B}, counts{Agreed: 1, Pending: 6}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGate(t)
			var r *Round
			// The blocked calls return only when g opens, after Do returned:
			// a Do that waited for them would never return.
			require.True(t, returnsWithin(prompt, func() {
				r = Group{Nodes: len(tt.s), Need: tt.need, Timeout: long}.Do(context.Background(), tt.s.call(g))
			}), "Do waited for a blocked node")
			g.open()

			assert.Equal(t, tt.want, countsOf(r))
			for i, want := range tt.s {
				assert.Equal(t, want, r.Answer(i), "node %d", i)
			}
			assert.Equal(t, tt.want.Failed, r.Unanswered(), "a node that was not waited for counts as unanswered")
			assertEnded(t, r, false, nil)
		})
	}
}

func TestDoTimeout(t *testing.T) {
	tests := []struct {
		name string
		call func(g *gate) Call
		// answered are the nodes that answer at once and so are counted,
		// unless the scheduler holds them past the timeout.
		answered script
	}{
		{
			name: "calls ignore ctx",
			call: func(g *gate) Call { return script{blocked, blocked, blocked}.call(g) },
		},
		{
			name: "calls honour ctx that has no deadline",
			call: func(g *gate) Call {
				return func(ctx context.Context, _ int) (bool, error) {
					select {
					case <-ctx.Done():
						return false, ctx.Err()
					case <-g.ch:
						return true, nil
					}
				}
			},
		},
		{
			name:     "undecided: one agrees, one refuses, the rest ignore ctx",
			call:     func(g *gate) Call { return script{Agreed, Refused, blocked}.call(g) },
			answered: script{Agreed, Refused},
		},
		{
			name:     "undecided: one agrees, one fails, the rest ignore ctx",
			call:     func(g *gate) Call { return script{Agreed, Failed, blocked}.call(g) },
			answered: script{Agreed, Failed},
		},
	}
	const n = 3
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGate(t)
			start := time.Now()
			r := Group{Nodes: n, Need: Majority(n), Timeout: short}.Do(context.Background(), tt.call(g))
			elapsed := time.Since(start)
			g.open()

			assert.GreaterOrEqual(t, elapsed, short, "Do returned before its timeout")
			assert.Less(t, elapsed, overrun, "Do overran its timeout")
			assert.Equal(t, tally(r), countsOf(r))
			assert.Equal(t, n, r.Nodes())
			for i := range n {
				if i < len(tt.answered) && r.Answer(i) != Pending {
					assert.Equal(t, tt.answered[i], r.Answer(i), "node %d", i)
					continue
				}
				assert.Equal(t, Pending, r.Answer(i), "node %d", i)
			}
			assertEnded(t, r, true, ErrTimeout)
			assert.Equal(t, n-r.Count(Agreed)-r.Count(Refused), r.Unanswered(), "the nodes that did not answer in time are unanswered")
		})
	}
}

func TestDoContext(t *testing.T) {
	tests := []struct {
		name string
		// ctx returns the round's context; it may end it at once or later.
		// started is closed once every call has begun.
		ctx  func(t *testing.T, started <-chan struct{}) context.Context
		want error
	}{
		{
			name: "cancelled while calls block",
			ctx: func(t *testing.T, started <-chan struct{}) context.Context {
				ctx, cancel := context.WithCancel(context.Background())
				t.Cleanup(cancel)
				go func() {
					<-started
					cancel()
				}()
				return ctx
			},
			want: context.Canceled,
		},
		{
			name: "deadline passes while calls block",
			ctx: func(t *testing.T, _ <-chan struct{}) context.Context {
				ctx, cancel := context.WithTimeout(context.Background(), short)
				t.Cleanup(cancel)
				return ctx
			},
			want: context.DeadlineExceeded,
		},
		{
			name: "cancelled before Do",
			ctx: func(*testing.T, <-chan struct{}) context.Context {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx
			},
			want: context.Canceled,
		},
	}
	const n = 3
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGate(t)
			var begun sync.WaitGroup
			begun.Add(n)
			started := make(chan struct{})
			go func() {
				begun.Wait()
				close(started)
			}()
			call := func(_ context.Context, node int) (bool, error) {
				begun.Done()
				return script{blocked, blocked, blocked}.answer(g, node)
			}
			ctx := tt.ctx(t, started)

			var r *Round
			require.True(t, returnsWithin(prompt, func() {
				r = Group{Nodes: n, Need: Majority(n), Timeout: long}.Do(ctx, call)
			}), "Do did not return when ctx ended")
			g.open()

			assert.Equal(t, counts{Pending: n}, countsOf(r))
			for i := range n {
				assert.Equal(t, Pending, r.Answer(i), "node %d", i)
				assert.ErrorIs(t, r.Err(i), tt.want, "node %d", i)
				assert.Equal(t, ctx.Err(), r.Err(i), "node %d", i)
			}
			// Even a context deadline is not the round's timeout.
			assert.False(t, r.TimedOut)
			assert.Equal(t, n, r.Unanswered())
		})
	}

	t.Run("cancelled before Do, call honours ctx", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		var r *Round
		require.True(t, returnsWithin(prompt, func() {
			r = Group{Nodes: 1, Need: 1, Timeout: long}.Do(ctx, func(ctx context.Context, _ int) (bool, error) {
				<-ctx.Done()
				return false, ctx.Err()
			})
		}), "Do did not return")
		// Whether Do saw the call's error or ctx end first, the node's error
		// is the context's and the node is unanswered.
		assert.Equal(t, 0, r.Count(Agreed)+r.Count(Refused))
		assert.Equal(t, 1, r.Count(Failed)+r.Count(Pending))
		assert.ErrorIs(t, r.Err(0), context.Canceled)
		assert.False(t, r.TimedOut)
		assert.Equal(t, 1, r.Unanswered())
	})
}

// TestUnanswered covers every way a round ends, with some nodes answering and
// others blocked: decided early (the blocked nodes were not waited for, so
// they have no error and are not unanswered), timed out and ended by the
// context (the blocked nodes are unanswered, with ErrTimeout or ctx.Err()).
func TestUnanswered(t *testing.T) {
	A, R, F, B := Agreed, Refused, Failed, blocked
	const (
		decided = iota
		timedOut
		ctxEnded
	)
	tests := []struct {
		name    string
		need    int
		timeout time.Duration
		// ctx, if set, returns the round's context; answered is closed once
		// every call that is not blocked has returned.
		ctx   func(t *testing.T, answered <-chan struct{}) context.Context
		s     script
		ended int
		// unanswered is exact for a decided round; for the others the
		// scheduler may hold an answer past the end, and then it counts.
		unanswered int
	}{
		{name: "won, a node not waited for", need: 2, timeout: long, s: script{A, A, B}, ended: decided, unanswered: 0},
		{name: "lost, a node not waited for", need: 2, timeout: long, s: script{F, R, B}, ended: decided, unanswered: 1},
		{name: "lost by failures, nodes not waited for", need: 3, timeout: long, s: script{F, B, F, B, F}, ended: decided, unanswered: 3},
		{name: "every node answered", need: 0, timeout: long, s: script{A, F, R}, ended: decided, unanswered: 1},
		{name: "timed out undecided", need: 2, timeout: short, s: script{A, F, B}, ended: timedOut, unanswered: 2},
		{name: "timed out, no node answered", need: 2, timeout: short, s: script{B, B, B}, ended: timedOut, unanswered: 3},
		{
			name: "cancelled undecided", need: 2, timeout: long, s: script{A, F, B}, ended: ctxEnded, unanswered: 2,
			ctx: func(t *testing.T, answered <-chan struct{}) context.Context {
				ctx, cancel := context.WithCancel(context.Background())
				t.Cleanup(cancel)
				go func() {
					<-answered
					cancel()
				}()
				return ctx
			},
		},
		{
			name: "context deadline undecided", need: 2, timeout: long, s: script{A, R, B}, ended: ctxEnded, unanswered: 1,
			ctx: func(t *testing.T, _ <-chan struct{}) context.Context {
				ctx, cancel := context.WithTimeout(context.Background(), short)
				t.Cleanup(cancel)
				return ctx
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := len(tt.s)
			g := newGate(t)
			var fast sync.WaitGroup
			for _, a := range tt.s {
				if a != blocked {
					fast.Add(1)
				}
			}
			answered := make(chan struct{})
			go func() {
				fast.Wait()
				close(answered)
			}()
			call := func(_ context.Context, node int) (bool, error) {
				if tt.s[node] != blocked {
					defer fast.Done()
				}
				return tt.s.answer(g, node)
			}
			ctx := context.Background()
			if tt.ctx != nil {
				ctx = tt.ctx(t, answered)
			}

			var r *Round
			require.True(t, returnsWithin(prompt, func() {
				r = Group{Nodes: n, Need: tt.need, Timeout: tt.timeout}.Do(ctx, call)
			}), "Do did not return")
			g.open()

			assert.Equal(t, tally(r), countsOf(r))
			for i, want := range tt.s {
				if got := r.Answer(i); want == blocked || got != Pending {
					assert.Equal(t, want, got, "node %d", i)
				}
			}
			switch tt.ended {
			case decided:
				assertEnded(t, r, false, nil)
				assert.Equal(t, tt.unanswered, r.Unanswered())
			case timedOut:
				assertEnded(t, r, true, ErrTimeout)
				assert.Equal(t, n-r.Count(Agreed)-r.Count(Refused), r.Unanswered())
				assert.GreaterOrEqual(t, r.Unanswered(), tt.unanswered)
			case ctxEnded:
				require.Error(t, ctx.Err())
				assertEnded(t, r, false, ctx.Err())
				assert.Equal(t, n-r.Count(Agreed)-r.Count(Refused), r.Unanswered())
				assert.GreaterOrEqual(t, r.Unanswered(), tt.unanswered)
			}
		})
	}
}

// TestRoundReadWhileLateCallsReturn: a Round is final when Do returns, so its
// fields and methods may be read while calls that outlived the round return.
// Under -race this catches a method that reads what those calls still write.
func TestRoundReadWhileLateCallsReturn(t *testing.T) {
	s := script{Agreed, Agreed, blocked, blocked, blocked}
	n := len(s)
	g := newGate(t)
	var late sync.WaitGroup
	late.Add(3)
	call := func(_ context.Context, node int) (bool, error) {
		if s[node] == blocked {
			defer late.Done()
		}
		return s.answer(g, node)
	}
	r := Group{Nodes: n, Need: 2, Timeout: long}.Do(context.Background(), call)
	require.Equal(t, counts{Agreed: 2, Pending: 3}, countsOf(r))

	g.open()
	for range 3 {
		assert.Equal(t, tally(r), countsOf(r))
		assertEnded(t, r, false, nil)
	}
	// The late calls have returned, but Do learns of it without telling
	// the reader: these reads are as unordered with Do's as the ones above.
	late.Wait()
	assertEnded(t, r, false, nil)
}

// TestDoNeedOutOfRange checks the documented rule that a need of zero or
// more than n waits for every node. The slow nodes answer a little after the
// fast one; Do must count them all.
func TestDoNeedOutOfRange(t *testing.T) {
	const n = 3
	tests := []struct {
		name  string
		first Answer // node 0's answer, given at once; the others agree later
		want  counts
	}{
		{"all agree", Agreed, counts{Agreed: n}},
		{"first refuses", Refused, counts{Agreed: n - 1, Refused: 1}},
		{"first fails", Failed, counts{Agreed: n - 1, Failed: 1}},
	}
	for _, need := range []int{0, -1, n + 1} {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("need=%d/%s", need, tt.name), func(t *testing.T) {
				g := newGate(t)
				s := script{tt.first, blocked, blocked}
				// Only a round that returns early can miss the slow nodes, so
				// how late they come does not matter to a correct Do.
				time.AfterFunc(20*time.Millisecond, g.open)

				var r *Round
				require.True(t, returnsWithin(prompt, func() {
					r = Group{Nodes: n, Need: need, Timeout: long}.Do(context.Background(), s.call(g))
				}), "Do did not return")

				require.Equal(t, tt.want, countsOf(r), "Do returned before every node answered")
				assert.Equal(t, tt.first, r.Answer(0))
				for i := 1; i < n; i++ {
					assert.Equal(t, Agreed, r.Answer(i), "node %d", i)
				}
				assertEnded(t, r, false, nil)
			})
		}
	}
}

func TestDoNoNodes(t *testing.T) {
	for _, need := range []int{-1, 0, 1} {
		t.Run(fmt.Sprintf("need=%d", need), func(t *testing.T) {
			var calls atomic.Int32
			r := Group{Nodes: 0, Need: need, Timeout: long}.Do(context.Background(), func(context.Context, int) (bool, error) {
				calls.Add(1)
				return true, nil
			})
			assert.Equal(t, counts{}, countsOf(r))
			assert.Equal(t, 0, r.Nodes())
			assert.Zero(t, calls.Load())
			assert.False(t, r.TimedOut)
			assert.Zero(t, r.Unanswered())

			var undos atomic.Int32
			require.True(t, returnsWithin(prompt, func() {
				r.Undo(context.Background(), long, func(context.Context, int) { undos.Add(1) })
				r.WaitUndone()
			}), "Undo of an empty round did not return")
			assert.Zero(t, undos.Load())
		})
	}
}

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

// TestConcurrentRounds runs many rounds at once with random answers, delays,
// timeouts and cancellations, and undoes some of them; it is meant for -race.
func TestConcurrentRounds(t *testing.T) {
	const rounds = 200
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)

	var wg sync.WaitGroup
	for k := range rounds {
		rng := rand.New(rand.NewPCG(seed, uint64(k)))
		wg.Go(func() { randomRound(t, rng) })
	}
	wg.Wait()
}

func randomRound(t *testing.T, rng *rand.Rand) {
	n := 1 + rng.IntN(7)
	need := rng.IntN(n + 2) // includes the out-of-range 0 and n+1
	timeout := time.Duration(1+rng.IntN(4)) * time.Millisecond
	s := make(script, n)
	delay := make([]time.Duration, n)
	for i := range n {
		s[i] = []Answer{Agreed, Refused, Failed}[rng.IntN(3)]
		delay[i] = time.Duration(rng.IntN(3000)) * time.Microsecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if rng.IntN(4) == 0 {
		time.AfterFunc(time.Duration(rng.IntN(3000))*time.Microsecond, cancel)
	}
	withUndo := rng.IntN(2) == 0

	var (
		calls    sync.WaitGroup
		returned = make([]atomic.Bool, n)
		undone   = make([]atomic.Int32, n)
	)
	calls.Add(n)
	call := func(_ context.Context, node int) (bool, error) {
		defer calls.Done()
		defer returned[node].Store(true)
		time.Sleep(delay[node])
		return s.answer(nil, node)
	}
	undo := func(_ context.Context, node int) {
		assert.True(t, returned[node].Load(), "node %d undone before its call returned", node)
		undone[node].Add(1)
	}

	var r *Round
	if !assert.True(t, returnsWithin(prompt, func() { r = Group{Nodes: n, Need: need, Timeout: timeout}.Do(ctx, call) }), "Do did not return") {
		return
	}
	assert.Equal(t, n, r.Nodes())
	assert.Equal(t, n, r.Count(Agreed)+r.Count(Refused)+r.Count(Failed)+r.Count(Pending))
	assert.Equal(t, tally(r), countsOf(r))
	firstPending := -1
	for i := range n {
		if got := r.Answer(i); got != Pending {
			assert.Equal(t, s[i], got, "node %d", i)
		} else if firstPending < 0 {
			firstPending = i
		}
	}
	decided := need > 0 && need <= n && (r.Count(Agreed) >= need || r.Count(Refused)+r.Count(Failed) > n-need)
	switch {
	case r.TimedOut:
		assertEnded(t, r, true, ErrTimeout)
	case firstPending >= 0 && !decided:
		// Only the context ends an undecided round before its timeout.
		assertEnded(t, r, false, context.Canceled)
	case firstPending >= 0 && r.Err(firstPending) != nil:
		// The context ended the round just before the answers that decide
		// it were counted.
		assert.Error(t, ctx.Err())
		assertEnded(t, r, false, context.Canceled)
	default:
		assertEnded(t, r, false, nil)
	}

	if withUndo {
		if !assert.True(t, returnsWithin(prompt, func() { r.Undo(context.Background(), long, undo) }), "Undo did not return") {
			return
		}
		for i := range n {
			if r.Answer(i) != Pending {
				assert.Equal(t, int32(1), undone[i].Load(), "node %d answered, its undo has not run", i)
			}
		}
		if !assert.True(t, returnsWithin(prompt, r.WaitUndone), "WaitUndone did not return") {
			return
		}
	}
	if !assert.True(t, returnsWithin(prompt, calls.Wait), "calls did not return") {
		return
	}
	for i := range n {
		want := int32(0)
		if withUndo {
			want = 1
		}
		assert.Equal(t, want, undone[i].Load(), "undos of node %d", i)
	}
}

// sink keeps benchmark results alive, so the compiler cannot drop the work.
var sink *Round

func BenchmarkDo(b *testing.B) {
	agree := func(context.Context, int) (bool, error) { return true, nil }
	ctx := context.Background()
	for _, n := range []int{1, 3, 5, 7} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			need := Majority(n)
			for b.Loop() {
				sink = Group{Nodes: n, Need: need, Timeout: time.Second}.Do(ctx, agree)
			}
		})
	}
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
