package quorum

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrTimeout is the error of a node that had not answered when its round's
// timeout passed.
var ErrTimeout = errors.New("quorum: node did not answer in time")

// Majority is the smallest number of nodes that is more than half of n.
func Majority(n int) int { return n/2 + 1 }

// Call is one node's part of a round. It reports whether the node agreed.
// A node that answered and refused returns (false, nil); a node that could not
// answer returns a non-nil error.
type Call func(ctx context.Context, node int) (agreed bool, err error)

// Answer is what one node said in a round.
type Answer uint8

const (
	Pending Answer = iota // no answer before the round ended
	Agreed                // the call returned true
	Refused               // the call returned false and no error
	Failed                // the call returned an error
)

// Round is the outcome of [Do]. Its counts and per-node answers are final
// when Do returns; calls still running then are Pending and stay so.
type Round struct {
	Agreed, Refused, Failed, Pending int
	// TimedOut is true when the round ended because its timeout passed.
	TimedOut bool

	nodes    []node
	deadline time.Time   // start + timeout
	timer    *time.Timer // Do's, reused by Undo

	mu        sync.Mutex
	decided   bool // the round has ended; later results are not counted
	returnedN int  // calls that have returned
	undo      func(node int)
	cutoff    bool      // Undo no longer waits for undos that start from now on
	waited    int       // undos started before the cutoff
	waitedEnd int       // ... and finished
	lastStart time.Time // when the last of them started
	changed   chan struct{}
	undoing   sync.WaitGroup
}

// node is one node's part of a Round. answer and err are written by Do
// alone; returned is written under mu by the call's goroutine, even after
// Do returned, so code outside mu must not copy a whole node.
type node struct {
	answer   Answer
	err      error
	returned bool
}

// Answer reports what node said.
func (r *Round) Answer(node int) Answer { return r.nodes[node].answer }

// Err returns node's error: the call's own for a Failed node; for a Pending
// node, [ErrTimeout] if the round timed out or the context's error if the
// context ended it. It is nil for a node that agreed or refused, and for a
// Pending node that was not waited for because the outcome was already
// known.
func (r *Round) Err(node int) error { return r.nodes[node].err }

// Unanswered counts the nodes that failed or did not answer in time (or
// before the context ended): the nodes known to be unavailable.
func (r *Round) Unanswered() int {
	n := r.Failed
	if r.TimedOut || r.ctxEnded() {
		n += r.Pending
	}
	return n
}

func (r *Round) ctxEnded() bool {
	for i := range r.nodes {
		if n := &r.nodes[i]; n.answer == Pending {
			return n.err != nil && n.err != ErrTimeout
		}
	}
	return false
}

// Nodes is the number of nodes in the round.
func (r *Round) Nodes() int { return len(r.nodes) }

// Do runs call on nodes 0..n-1 concurrently and returns when one of these
// holds: need nodes agreed; so many refused or failed that need can no
// longer be reached; every node answered; timeout passed; ctx ended. A need
// of zero or less, or more than n, waits for every node (still bounded by
// timeout and ctx).
//
// Do passes ctx to every call unchanged; the timeout is enforced by Do, not
// through the context, so it holds even for clients that ignore deadlines.
func Do(ctx context.Context, n, need int, timeout time.Duration, call Call) *Round {
	waitAll := need <= 0 || need > n
	r := &Round{nodes: make([]node, n), deadline: time.Now().Add(timeout)}
	if n == 0 {
		return r
	}
	results := make(chan result, n)
	for i := 0; i < n; i++ {
		go r.run(ctx, i, call, results)
	}

	r.timer = time.NewTimer(timeout)
	defer r.timer.Stop()
	var ctxErr error
	answered := 0
wait:
	for answered < n {
		select {
		case res := <-results:
			answered++
			r.record(res)
			if !waitAll && (r.Agreed >= need || r.Refused+r.Failed > n-need) {
				break wait
			}
		case <-r.timer.C:
			r.TimedOut = true
			break wait
		case <-ctx.Done():
			ctxErr = ctx.Err()
			break wait
		}
	}

	r.mu.Lock()
	r.decided = true
	// Results sent before the lock was taken belong to the round.
	for len(results) > 0 {
		r.record(<-results)
	}
	r.mu.Unlock()
	for i := range r.nodes {
		n := &r.nodes[i]
		if n.answer != Pending {
			continue
		}
		r.Pending++
		switch {
		case ctxErr != nil:
			n.err = ctxErr
		case r.TimedOut:
			n.err = ErrTimeout
		}
	}
	return r
}

type result struct {
	node   int
	agreed bool
	err    error
}

func (r *Round) record(res result) {
	n := &r.nodes[res.node]
	switch {
	case res.err != nil:
		n.answer, n.err = Failed, res.err
		r.Failed++
	case res.agreed:
		n.answer = Agreed
		r.Agreed++
	default:
		n.answer = Refused
		r.Refused++
	}
}

func (r *Round) run(ctx context.Context, node int, call Call, results chan<- result) {
	agreed, err := call(ctx, node)
	r.mu.Lock()
	r.nodes[node].returned = true
	r.returnedN++
	if !r.decided {
		results <- result{node, agreed, err} // buffered: never blocks
	}
	undo, waited := r.undo, false
	if undo != nil && !r.cutoff {
		waited = true
		r.waited++
		r.lastStart = time.Now()
	}
	r.mu.Unlock()
	if undo != nil {
		r.signal()
		r.runUndo(undo, node, waited)
	}
}

func (r *Round) runUndo(undo func(int), node int, waited bool) {
	defer r.undoing.Done()
	undo(node)
	if waited {
		r.mu.Lock()
		r.waitedEnd++
		r.mu.Unlock()
		r.signal()
	}
}

// signal wakes Undo to look at the round again. The channel holds one
// wake-up; Undo rereads everything on each, so none is lost.
func (r *Round) signal() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// Undo runs undo(node) for every node of the round, each only after that
// node's call has returned: at once for calls that have returned, and for
// calls still running, as soon as each returns. Undo or UndoUntil must be
// called at most once, after Do returned.
//
// Undo waits for the undos of the responsive nodes: those whose call
// returned by the round's deadline (the start of Do plus its timeout). It
// returns once every call has returned or the deadline has passed, and
// every undo started by then has finished or has had timeout to do so.
// Undos of calls that outlive the deadline run in the background;
// [Round.WaitUndone] waits for every undo.
//
// undo is not given a context: it should bound itself, and it should not use
// a context that the caller may already have cancelled.
func (r *Round) Undo(timeout time.Duration, undo func(node int)) {
	r.UndoUntil(timeout, undo, nil)
}

// UndoUntil is [Round.Undo] that stops waiting as soon as enough reports
// true; enough is asked again after each undo Undo waits for has finished.
// The undos it no longer waits for still run. It suits a release after
// success: once a majority confirmed, a slow node must not hold up the
// caller. A nil enough is never satisfied.
func (r *Round) UndoUntil(timeout time.Duration, undo func(node int), enough func() bool) {
	n := len(r.nodes)
	if n == 0 {
		return
	}
	r.mu.Lock()
	r.undo = undo
	r.changed = make(chan struct{}, 1)
	r.undoing.Add(n)
	r.lastStart = time.Now()
	for i := range r.nodes {
		if r.nodes[i].returned {
			r.waited++
			go r.runUndo(undo, i, true)
		}
	}
	r.mu.Unlock()

	for {
		now := time.Now()
		r.mu.Lock()
		if !r.cutoff && (r.returnedN == n || !now.Before(r.deadline)) {
			r.cutoff = true
		}
		cutoff, settled, limit := r.cutoff, r.waitedEnd == r.waited, r.lastStart.Add(timeout)
		r.mu.Unlock()
		var next time.Time
		switch {
		case enough != nil && enough():
			return
		case !cutoff: // calls that return before the deadline are responsive
			next = r.deadline
		case settled || !now.Before(limit):
			return
		default:
			next = limit
		}
		r.timer.Reset(next.Sub(now))
		select {
		case <-r.changed:
		case <-r.timer.C:
		}
		r.timer.Stop()
	}
}

// WaitUndone blocks until every undo started by [Round.Undo] has finished,
// including those of calls that outlived the round. It exists for tests and
// for orderly shutdown; a lock client never needs to wait for them.
func (r *Round) WaitUndone() { r.undoing.Wait() }
