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

// Round is the outcome of [Group.Do]. Its counts and per-node answers are final
// when Do returns; calls still running then are Pending and stay so.
type Round struct {
	// TimedOut is true when the round ended because its timeout passed.
	TimedOut bool

	agreed, refused, failed, pending int

	nodes    []node
	small    [5]node         // nodes of a round of at most 5
	deadline time.Time       // start + timeout
	pool     *Pool           // runs the calls and undos
	calls    context.Context // the calls' context: done at the deadline or once every call returned
	cancel   context.CancelFunc

	mu        sync.Mutex
	decided   bool // the round has ended; later results are not counted
	returnedN int  // calls that have returned
	undo      func(context.Context, int)
	// The undos that start by undoBy (the later of the round's deadline and
	// the call to Undo) share undoCtx, which ends timeout after undoBy; a
	// later one gets its own from undoParent and undoTimeout.
	undoCtx     context.Context
	undoEnd     context.CancelFunc
	undoBy      time.Time
	undoParent  context.Context
	undoTimeout time.Duration
	sharing     int       // undos started on undoCtx
	shared      int       // ... and finished
	lastStart   time.Time // when the last undo Undo waits for started
	cutoff      bool      // Undo no longer waits for undos that start from now on
	waited      int       // undos started before the cutoff
	waitedEnd   int       // ... and finished
	changed     chan struct{}
	undoing     sync.WaitGroup
}

// node is one node's part of a Round. answer and err are written by Do
// alone; returned is written under mu by the call's goroutine, even after
// Do returned, so code outside mu must not copy a whole node.
type node struct {
	answer   Answer
	err      error
	returned bool
	call     result // what the call returned, counted or not
}

// Result is what node's call returned, whether or not the round counted
// it (a call that returned after the round ended is Pending in the round).
// It may be read once the call has returned: inside node's undo, which runs
// only after it, or after [Round.WaitUndone].
func (r *Round) Result(node int) (agreed bool, err error) {
	c := r.nodes[node].call
	return c.agreed, c.err
}

// Returned is what node's call returned, with ok false while it is still
// running. Unlike [Round.Result] it may be called at any time: a call that
// answered after the round ended is seen here, though its Answer stays
// Pending.
func (r *Round) Returned(node int) (agreed bool, err error, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := &r.nodes[node]
	return n.call.agreed, n.call.err, n.returned
}

// Done is closed once every call of the round has returned, the round's
// timeout has passed or Do's ctx has ended: from then on [Round.Returned]
// changes only for calls that outlive the round.
func (r *Round) Done() <-chan struct{} {
	if r.calls == nil { // Settled: no call ran
		return closed
	}
	return r.calls.Done()
}

var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Count is the number of nodes that gave answer a.
func (r *Round) Count(a Answer) int {
	switch a {
	case Agreed:
		return r.agreed
	case Refused:
		return r.refused
	case Failed:
		return r.failed
	}
	return r.pending
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
	n := r.failed
	if r.TimedOut || r.ctxEnded() {
		n += r.pending
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

// Group is a set of nodes and what a round over them needs. The zero Need
// (or one above Nodes) waits for every node, still bounded by Timeout.
type Group struct {
	Nodes   int           // nodes 0..Nodes-1
	Need    int           // agreements that decide the round
	Timeout time.Duration // the round's bound
	Pool    *Pool         // runs the calls and undos (nil: a goroutine each)
}

// Do runs call on the group's nodes concurrently and returns when one of
// these holds: Need nodes agreed; so many refused or failed that Need can no
// longer be reached; every node answered; Timeout passed; ctx ended.
//
// Each call gets one context shared by the round: ctx with the round's
// deadline (its start plus timeout), so a client that honours deadlines
// gives up in time. When that deadline ends it, its context.Cause is
// [ErrTimeout]; when ctx ends first, ctx's cause. Do enforces the timeout itself too, so it holds for
// clients that ignore deadlines; such a call keeps running after the round.
func (g Group) Do(ctx context.Context, call Call) *Round {
	n, need, timeout := g.Nodes, g.Need, g.Timeout
	waitAll := need <= 0 || need > n
	r := &Round{deadline: time.Now().Add(timeout), pool: g.Pool}
	if n <= len(r.small) {
		r.nodes = r.small[:n] // one allocation for the usual round
	} else {
		r.nodes = make([]node, n)
	}
	if n == 0 {
		return r
	}
	// The cause tells a call that the round's deadline ended it, not ctx.
	r.calls, r.cancel = context.WithDeadlineCause(ctx, r.deadline, ErrTimeout)
	results := make(chan result, n)
	for i := 0; i < n; i++ {
		r.pool.start(task{r: r, node: i, call: call, results: results})
	}

	var ctxErr error
	answered := 0
wait:
	for answered < n {
		select {
		case res := <-results:
			answered++
			if res.err != nil && !time.Now().Before(r.deadline) {
				// Failed at the deadline (a client that honours the round's
				// context): it did not answer in time.
				r.TimedOut = true
				break wait
			}
			r.record(res)
			if !waitAll && (r.agreed >= need || r.refused+r.failed > n-need) {
				break wait
			}
		case <-r.calls.Done():
			// The deadline passed, ctx ended, or every call returned (its
			// result is then in results, and read below).
			if ctxErr = ctx.Err(); ctxErr == nil && !time.Now().Before(r.deadline) {
				r.TimedOut = true
			}
			break wait
		}
	}

	r.mu.Lock()
	r.decided = true
	// Results sent before the lock was taken belong to the round.
	for len(results) > 0 {
		if res := <-results; res.err == nil || !r.TimedOut {
			r.record(res)
		}
	}
	r.mu.Unlock()
	for i := range r.nodes {
		n := &r.nodes[i]
		if n.answer != Pending {
			continue
		}
		r.pending++
		switch {
		case ctxErr != nil:
			n.err = ctxErr
		case r.TimedOut:
			n.err = ErrTimeout
		}
	}
	return r
}

// Settled returns a round that ran no call: it has ended, and every node's
// call returned, agreed where agreed[i] and refused elsewhere. It stands
// for what the nodes did without a round of the caller's, so that undoing
// it reaches every node at once.
func Settled(agreed []bool) *Round {
	r := &Round{deadline: time.Now(), decided: true}
	if len(agreed) <= len(r.small) {
		r.nodes = r.small[:len(agreed)]
	} else {
		r.nodes = make([]node, len(agreed))
	}
	for i, a := range agreed {
		r.record(result{node: i, agreed: a})
		r.nodes[i].returned = true
		r.nodes[i].call = result{node: i, agreed: a}
	}
	r.returnedN = len(agreed)
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
		r.failed++
	case res.agreed:
		n.answer = Agreed
		r.agreed++
	default:
		n.answer = Refused
		r.refused++
	}
}

func (r *Round) run(node int, call Call, results chan<- result) {
	agreed, err := call(r.calls, node)
	r.returned(node, agreed, err, results)
}

// returned records what node's call returned, hands it to Do while the
// round is open, and starts its undo once one is asked for. A function of
// its own, not inlined, so that run's frame, which is on the stack
// through the whole call (a Redis client's deep one), stays small: with
// this code in run, a round over five redis-servers took 10-15% longer
// at p50 (docs/benchmarks.md).
//
//go:noinline
func (r *Round) returned(node int, agreed bool, err error, results chan<- result) {
	r.mu.Lock()
	r.nodes[node].returned = true
	r.nodes[node].call = result{node, agreed, err}
	r.returnedN++
	last := r.returnedN == len(r.nodes)
	if !r.decided {
		results <- result{node, agreed, err} // buffered: never blocks
	}
	undo, waited := r.undo, false
	var ctx context.Context // nil: runUndo makes one
	if undo != nil {
		now := time.Now()
		if !r.cutoff {
			waited = true
			r.waited++
			r.lastStart = now
		}
		if !now.After(r.undoBy) {
			r.sharing++
			ctx = r.undoCtx
		}
	}
	r.mu.Unlock()
	if last {
		r.cancel()
	}
	if undo != nil {
		r.signal()
		r.runUndo(ctx, undo, node, waited)
	}
}

// runUndo runs undo for node on ctx, the shared context, or on a context of
// its own when ctx is nil.
func (r *Round) runUndo(ctx context.Context, undo func(context.Context, int), node int, waited bool) {
	defer r.undoing.Done()
	if ctx == nil {
		own, cancel := context.WithTimeout(r.undoParent, r.undoTimeout)
		undo(own, node)
		cancel()
	} else {
		undo(ctx, node)
		r.mu.Lock()
		r.shared++
		// Done with the shared context once no undo can start on it any more.
		done := r.shared == r.sharing && (r.returnedN == len(r.nodes) || time.Now().After(r.undoBy))
		r.mu.Unlock()
		if done {
			r.undoEnd()
		}
	}
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

// Undo runs undo(ctx, node) for every node of the round, each only after
// that node's call has returned: at once for calls that have returned, and
// for calls still running, as soon as each returns. Undo or UndoUntil must
// be called at most once, after Do returned.
//
// Each undo's context is ctx with a deadline: timeout after the later of
// the round's deadline and the call to Undo for the undos that start by
// then (they share one context), timeout after its start for a later one.
// Pass a ctx that the caller's cancellation does not reach
// ([context.WithoutCancel]) when the undo must happen anyway.
//
// Undo waits for the undos of the responsive nodes: those whose call
// returned by the round's deadline. It returns once every call has returned
// or the deadline has passed, and every undo started by then has finished
// or has had timeout to do so. Undos of calls that outlive the deadline run
// in the background; [Round.WaitUndone] waits for every undo.
func (r *Round) Undo(ctx context.Context, timeout time.Duration, undo func(ctx context.Context, node int)) {
	r.UndoUntil(ctx, timeout, undo, nil)
}

// UndoUntil is [Round.Undo] that stops waiting as soon as enough reports
// true; enough is asked again after each undo Undo waits for has finished.
// The undos it no longer waits for still run. It suits a release after
// success: once a majority confirmed, a slow node must not hold up the
// caller. A nil enough is never satisfied.
func (r *Round) UndoUntil(ctx context.Context, timeout time.Duration, undo func(ctx context.Context, node int), enough func() bool) {
	n := len(r.nodes)
	if n == 0 {
		return
	}
	r.mu.Lock()
	r.undo = undo
	r.undoParent, r.undoTimeout = ctx, timeout
	r.changed = make(chan struct{}, 1)
	r.undoing.Add(n)
	r.lastStart = time.Now()
	r.undoBy = r.lastStart
	if r.undoBy.Before(r.deadline) {
		r.undoBy = r.deadline
	}
	r.undoCtx, r.undoEnd = context.WithDeadline(ctx, r.undoBy.Add(timeout))
	for i := range r.nodes {
		if r.nodes[i].returned {
			r.sharing++
		}
	}
	r.waited = r.sharing
	for i := range r.nodes {
		if r.nodes[i].returned {
			r.pool.start(task{r: r, node: i, ctx: r.undoCtx, undo: undo, waited: true})
		}
	}
	r.mu.Unlock()

	// A timer only where no context at hand tells the time: the bound of
	// the undos waited for, the deadline of a round that ctx ended early.
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	at := func(t time.Time) <-chan time.Time {
		if timer == nil {
			timer = time.NewTimer(time.Until(t))
		} else {
			timer.Reset(time.Until(t))
		}
		return timer.C
	}
	for {
		now := time.Now()
		r.mu.Lock()
		if !r.cutoff && (r.returnedN == n || !now.Before(r.deadline)) {
			r.cutoff = true
		}
		cutoff, settled, last := r.cutoff, r.waitedEnd == r.waited, r.lastStart
		r.mu.Unlock()
		var wake <-chan struct{}
		var alarm <-chan time.Time
		switch {
		case enough != nil && enough():
			return
		case cutoff && (settled || !now.Before(last.Add(timeout))):
			return
		case cutoff:
			alarm = at(last.Add(timeout))
		case r.calls.Err() == nil: // calls that return before the deadline are responsive
			wake = r.calls.Done()
		default: // ctx ended the round before its deadline
			alarm = at(r.deadline)
		}
		select {
		case <-r.changed:
		case <-wake:
		case <-alarm:
		}
	}
}

// WaitUndone blocks until every undo started by [Round.Undo] has finished,
// including those of calls that outlived the round. It exists for tests and
// for orderly shutdown; a lock client never needs to wait for them.
func (r *Round) WaitUndone() { r.undoing.Wait() }
