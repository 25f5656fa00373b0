package quorum

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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

// TestReturned: a call that answers after its round was decided stays
// Pending in the round, but Returned sees what it returned, and reports a
// call still running as not returned.
func TestReturned(t *testing.T) {
	release := make(chan struct{})
	r := Group{Nodes: 4, Need: 2, Timeout: 10 * time.Second}.Do(context.Background(), func(ctx context.Context, node int) (bool, error) {
		switch node {
		case 3:
			<-release
			return true, nil
		case 2:
			return false, fmt.Errorf("down")
		}
		return true, nil
	})
	require.Equal(t, Pending, r.Answer(3))
	for node := range 2 {
		agreed, err, ok := r.Returned(node)
		assert.True(t, ok && agreed && err == nil, "node %d", node)
	}
	assert.Eventually(t, func() bool {
		_, err, ok := r.Returned(2)
		return ok && err != nil && err.Error() == "down"
	}, 5*time.Second, time.Millisecond)
	_, _, ok := r.Returned(3)
	assert.False(t, ok, "a running call reported as returned")
	close(release)
	assert.Eventually(t, func() bool {
		agreed, err, ok := r.Returned(3)
		return ok && agreed && err == nil
	}, 5*time.Second, time.Millisecond)
	assert.Equal(t, Pending, r.Answer(3), "the round's answers changed after it ended")
}

// TestRoundDone: Done stays open while a call of the round runs, after the
// round was decided, and closes once the last call returned, or at the
// round's timeout when a call hangs; a Settled round's is closed.
func TestRoundDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release, release2 := make(chan struct{}), make(chan struct{})
		r := Group{Nodes: 3, Need: 2, Timeout: time.Second}.Do(context.Background(), func(ctx context.Context, node int) (bool, error) {
			if node == 2 {
				<-release
			}
			return true, nil
		})
		require.Equal(t, Pending, r.Answer(2), "decided before the last call")
		synctest.Wait()
		select {
		case <-r.Done():
			t.Fatal("Done closed while a call runs")
		default:
		}
		close(release)
		synctest.Wait()
		select {
		case <-r.Done():
		default:
			t.Fatal("Done not closed once every call returned")
		}

		hung := Group{Nodes: 3, Need: 2, Timeout: time.Second}.Do(context.Background(), func(ctx context.Context, node int) (bool, error) {
			if node == 2 {
				<-release2 // ignores its context, as a hung client would
			}
			return true, nil
		})
		start := time.Now()
		<-hung.Done()
		close(release2)
		assert.Equal(t, time.Second, time.Since(start), "Done of a round with a hung call closes at its timeout")

		<-Settled([]bool{true, false}).Done()
	})
}
