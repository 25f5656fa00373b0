package quorum

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
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
