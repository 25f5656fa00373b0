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

	answers  []Answer
	errs     []error
	deadline time.Time // start + timeout

	mu       sync.Mutex
	decided  bool   // the round has ended; later results are not counted
	returned []bool // the node's call has returned (also after the round ended)
	undo     func(node int)
	started  int           // undos started
	finished chan struct{} // one send per finished undo
	undoing  sync.WaitGroup
}

// Answer reports what node said.
func (r *Round) Answer(node int) Answer { return r.answers[node] }

// Err returns node's error: the call's own for a Failed node; for a Pending
// node, [ErrTimeout] if the round timed out or the context's error if the
// context ended it. It is nil for a node that agreed or refused, and for a
// Pending node that was not waited for because the outcome was already
// known.
func (r *Round) Err(node int) error { return r.errs[node] }

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
	for i, a := range r.answers {
		if a == Pending {
			return r.errs[i] != nil && r.errs[i] != ErrTimeout
		}
	}
	return false
}

// Nodes is the number of nodes in the round.
func (r *Round) Nodes() int { return len(r.answers) }

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
	r := &Round{
		answers:  make([]Answer, n),
		errs:     make([]error, n),
		returned: make([]bool, n),
		deadline: time.Now().Add(timeout),
	}
	if n == 0 {
		return r
	}
	results := make(chan result, n)
	for i := 0; i < n; i++ {
		go r.run(ctx, i, call, results)
	}

	timer := time.NewTimer(timeout)
	defer timer.Stop()
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
		case <-timer.C:
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
	for i, a := range r.answers {
		if a != Pending {
			continue
		}
		r.Pending++
		switch {
		case ctxErr != nil:
			r.errs[i] = ctxErr
		case r.TimedOut:
			r.errs[i] = ErrTimeout
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
	switch {
	case res.err != nil:
		r.answers[res.node], r.errs[res.node] = Failed, res.err
		r.Failed++
	case res.agreed:
		r.answers[res.node] = Agreed
		r.Agreed++
	default:
		r.answers[res.node] = Refused
		r.Refused++
	}
}

func (r *Round) run(ctx context.Context, node int, call Call, results chan<- result) {
	agreed, err := call(ctx, node)
	r.mu.Lock()
	r.returned[node] = true
	undo := r.undo
	if !r.decided {
		results <- result{node, agreed, err} // buffered: never blocks
	}
	if undo != nil {
		r.started++
	}
	r.mu.Unlock()
	if undo != nil {
		r.runUndo(undo, node)
	}
}

func (r *Round) runUndo(undo func(int), node int) {
	defer r.undoing.Done()
	undo(node)
	r.finished <- struct{}{} // buffered for every node: never blocks
}

// Undo runs undo(node) for every node of the round, each only after that
// node's call has returned: at once for calls that have returned, and for
// calls still running, as soon as each returns. It must be called at most
// once, after Do returned.
//
// Undo waits for the undos of the nodes that were responsive: those whose
// call returned by the round's deadline (the start of Do plus its timeout),
// giving each undo up to timeout to finish. It does not wait for calls that
// outlive the round's deadline; their undos run in the background when the
// calls return. [Round.WaitUndone] waits for every undo.
//
// undo is not given a context: it should bound itself, and it should not use
// a context that the caller may already have cancelled.
func (r *Round) Undo(timeout time.Duration, undo func(node int)) {
	n := len(r.answers)
	if n == 0 {
		return
	}
	r.mu.Lock()
	r.undo = undo
	r.finished = make(chan struct{}, n)
	r.undoing.Add(n)
	var now []int
	for i := 0; i < n; i++ {
		if r.returned[i] {
			now = append(now, i)
		}
	}
	r.started += len(now)
	r.mu.Unlock()
	for _, i := range now {
		go r.runUndo(undo, i)
	}

	finished := 0
	// Until the round's deadline, calls still running may return and start
	// their undo: they count as responsive.
	if wait := time.Until(r.deadline); wait > 0 && len(now) < n {
		cutoff := time.NewTimer(wait)
	responsive:
		for finished < n {
			select {
			case <-r.finished:
				finished++
			case <-cutoff.C:
				break responsive
			}
		}
		cutoff.Stop()
	}
	r.mu.Lock()
	started := r.started
	r.mu.Unlock()
	if finished >= started {
		return
	}
	limit := time.NewTimer(timeout)
	defer limit.Stop()
	for finished < started {
		select {
		case <-r.finished:
			finished++
		case <-limit.C:
			return
		}
	}
}

// WaitUndone blocks until every undo started by [Round.Undo] has finished,
// including those of calls that outlived the round. It exists for tests and
// for orderly shutdown; a lock client never needs to wait for them.
func (r *Round) WaitUndone() { r.undoing.Wait() }
