package redlock

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"quorumlock.dev/quorum"
	"quorumlock.dev/redlock/check"
	"quorumlock.dev/redlock/internal/wait"
)

// Hooks are told what a client does, for metrics and traces (redlockprom
// and the redlockotel module build them), in net/http/httptrace's shape:
// each field is optional, and a nil one is off and costs nothing. A start
// hook (Acquire, Hold, Extend) gets the caller's context and returns
// the function told of the end (nil: not told), so that a tracer can start
// a span in the caller's trace and end it. Hooks run on the client's
// goroutines: they must be safe for concurrent use and return quickly.
// Outcomes are fixed words, fit for a metric label; a resource name is not.
type Hooks struct {
	// Acquire: a TryLock, Lock, TryLockAll or LockAll call (Do's too) on
	// resource (LockAll's resources joined with commas) begins, its
	// arguments checked. The context it returns (nil: ctx) is the call's
	// from then on, which Attempt, Vote and Hold get. done hears the
	// call's end: Outcome (acquired, not_acquired, quorum_unavailable,
	// fence_unavailable, unsafe_config, cancelled, error), Err, Took,
	// Attempts, and Validity and Fence when acquired.
	Acquire func(ctx context.Context, resource string) (_ context.Context, done func(Event))
	// Attempt: one attempt ended, with Acquire's Outcome words, Err, Took,
	// and Validity and Fence when acquired. A call whose context had ended
	// before its first attempt is told as one (cancelled), and so is a
	// lock handed to a waiting call by another holder's Unlock (with
	// context.Background: that Unlock is not the waiter's trace).
	Attempt func(ctx context.Context, e Event)
	// Vote: master e.Master answered an attempt after Took: Outcome is its
	// vote (agreed; refused: another holder's key is there; failed;
	// timeout: no answer within the node timeout, whatever came later;
	// quarantined: set, not counted, see [WithRestartGuard]; skipped: not
	// called, no reply for over 4 node timeouts) and Err its error. Told
	// for every master of every attempt, late answers too, but not for a
	// call that the caller's context ended: that says nothing of the master.
	Vote func(ctx context.Context, e Event)
	// Waiting: a Lock or LockAll call started waiting (+1): after a lost
	// attempt, or with [WithFairness] queued behind a waiter of its own
	// client; or it returned after it had (-1). No context: the wait
	// policies report it without the call's.
	Waiting func(delta int)
	// Wait: a Lock or LockAll call on resource waits after a lost attempt,
	// in the call's context (Acquire's). done hears the wait's end: Outcome
	// woke (for its next attempt, or to take a lock handed to it) or ended
	// (its context ended), Took the time waited, Err the lost attempt's
	// error that made it wait (ErrNotAcquired: a holder).
	Wait func(ctx context.Context, resource string) (done func(Event))
	// Hold: a call acquired the lock on resource. done hears, once, that
	// the lock ended on this side, before [Lock.Done] closes (its lease
	// timer runs, watched or not), with the Lock's state locked (it must
	// not call the Lock's methods): Took is how long it was held, Outcome
	// why it ended (unlocked, lease_ran_out, extend_failed, no_progress,
	// max_hold), Err the cause of [Lock.Context] (nil after Unlock),
	// Renewed whether [Lock.Renew]'s renewer was keeping it.
	Hold func(ctx context.Context, resource string) (done func(Event))
	// Extend: an Extend of the lock on resource, or a renewer's, begins;
	// done hears its end: Outcome (extended, not_held, quorum_unavailable,
	// cancelled, error), Err and Took.
	Extend func(ctx context.Context, resource string) (done func(Event))
	// Release: an Unlock of the lock on resource begins; done hears its
	// end: Outcome (released, not_held: the lock had ended or too few
	// masters held it, quorum_unavailable, error), Err and Took. The
	// renewer's own end of a lock is told to Hold, not here.
	Release func(ctx context.Context, resource string) (done func(Event))
	// MasterQuarantined and MasterRestored: the restart guard or the clock
	// monitor stopped counting master addr's votes until about until (told
	// again when until moves), or counts them again.
	MasterQuarantined func(addr string, until time.Time)
	MasterRestored    func(addr string)
	// MasterDrift: the clock monitor's estimate of master addr's clock
	// rate relative to ours (1.0 = same), after each estimate;
	// MasterClockJumped: a jump it found between two samples.
	MasterDrift       func(addr string, rate float64)
	MasterClockJumped func(addr string, by time.Duration)
}

// Event is what a hook is told; each hook says which fields it sets.
type Event struct {
	Outcome  string        // a fixed word, listed by each hook
	Err      error         // the error behind Outcome, if any
	Took     time.Duration // how long it took; Hold: how long the lock was held
	Master   string        // Vote: the master's address, as errors name it
	Attempts int           // Acquire: the rounds the call ran (none: handed a lock, or another TryLock's outcome)
	Validity time.Duration // acquired: the lease left
	Fence    uint64        // acquired with [WithFence]: the first resource's fence; else 0
	Renewed  bool          // Hold: a renewer ([Lock.Renew]) was keeping the lock
}

// voteOf classifies the outcome of one master's call of an attempt.
func voteOf(agreed bool, err error, took, timeout time.Duration) string {
	switch {
	case errors.Is(err, errStuck):
		return "skipped"
	case took >= timeout || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, quorum.ErrTimeout):
		return "timeout"
	case errors.Is(err, errQuarantined):
		return "quarantined"
	case err != nil:
		return "failed"
	case agreed:
		return "agreed"
	}
	return "refused"
}

// acquireOutcome is the word for how an acquisition (or one attempt) ended.
func acquireOutcome(err error) string {
	switch {
	case err == nil:
		return "acquired"
	case errors.Is(err, check.ErrUnsafe):
		return "unsafe_config"
	case errors.Is(err, ErrFenceUnavailable):
		return "fence_unavailable"
	case errors.Is(err, ErrQuorumUnavailable):
		return "quorum_unavailable"
	case errors.Is(err, ErrNotAcquired):
		return "not_acquired"
	case ctxEnded(err):
		return "cancelled" // the caller's context ended it, not a holder or a master
	}
	return "error"
}

// extendOutcome is the word for how an Extend ended.
func extendOutcome(err error) string {
	switch {
	case err == nil:
		return "extended"
	case errors.Is(err, ErrQuorumUnavailable):
		return "quorum_unavailable"
	case errors.Is(err, ErrLockNotHeld):
		return "not_held"
	case ctxEnded(err):
		return "cancelled"
	}
	return "error"
}

// releaseOutcome is the word for how an Unlock ended.
func releaseOutcome(err error) string {
	if err == nil {
		return "released"
	}
	return extendOutcome(err) // not_held, quorum_unavailable, cancelled, error
}

// holdOutcome is the word for why a held lock ended, from the cause of its
// context.
func holdOutcome(cause error) string {
	switch {
	case cause == errUnlocked:
		return "unlocked"
	case cause == errLeaseRanOut:
		return "lease_ran_out"
	case errors.Is(cause, ErrNoProgress):
		return "no_progress"
	case errors.Is(cause, ErrMaxHold):
		return "max_hold"
	}
	return "extend_failed" // the one other way a lock is lost (Lock.extend)
}

func ctxEnded(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// observeVotes wraps an attempt's call so that each master's answer is
// told to the Vote hook; without one it is call itself.
func (c *Client) observeVotes(call quorum.Call) quorum.Call {
	vote := c.cfg.hooks.Vote
	if vote == nil {
		return call
	}
	return func(ctx context.Context, i int) (bool, error) {
		start := time.Now()
		agreed, err := call(ctx, i)
		took := time.Since(start)
		if !callerEnded(ctx, err) && !errors.Is(err, wait.ErrNotAsked) {
			vote(ctx, Event{Outcome: voteOf(agreed, err, took, c.cfg.nodeTimeout), Err: err, Took: took, Master: c.addrs[i]})
		}
		return agreed, err
	}
}

// acquisition is one observed acquisition call, in its context for its
// attempts to count.
type acquisition struct {
	attempts atomic.Int32
}

type acquisitionKey struct{}

// observeAcquire runs fn, one acquisition call on resource (or on all of
// multi), and tells the Acquire and Hold hooks of it; without them it is
// fn(ctx), so an unobserved call allocates nothing more.
func (c *Client) observeAcquire(ctx context.Context, resource string, multi []string, fn func(context.Context) (*Lock, error)) (*Lock, error) {
	h := &c.cfg.hooks
	if h.Acquire == nil && h.Hold == nil {
		return fn(ctx)
	}
	if multi != nil {
		resource = strings.Join(multi, ",")
	}
	a := new(acquisition)
	var done func(Event)
	if h.Acquire != nil {
		var actx context.Context
		if actx, done = h.Acquire(ctx, resource); actx != nil {
			ctx = actx
		}
	}
	start := time.Now()
	l, err := fn(context.WithValue(ctx, acquisitionKey{}, a))
	e := Event{Outcome: acquireOutcome(err), Err: err, Took: time.Since(start), Attempts: int(a.attempts.Load())}
	if err == nil {
		now, _ := c.clock.now()
		e.Validity = l.Until().Sub(now)
		e.Fence, _ = l.Fence()
	}
	if done != nil {
		done(e)
	}
	if err == nil && h.Hold != nil {
		l.observeHold(ctx, resource)
	}
	return l, err
}

// attempted tells the hooks of one round in ctx that ended after took
// with got, or err; round: it ran on the masters (Acquire counts it).
func (c *Client) attempted(ctx context.Context, took time.Duration, got *Lock, err error, round bool) {
	if a, _ := ctx.Value(acquisitionKey{}).(*acquisition); a != nil && round {
		a.attempts.Add(1)
	}
	attempt := c.cfg.hooks.Attempt
	if attempt == nil {
		return
	}
	e := Event{Outcome: acquireOutcome(err), Err: err, Took: took}
	if err == nil {
		now, _ := c.clock.now()
		e.Validity = got.Until().Sub(now)
		e.Fence, _ = got.Fence()
	}
	attempt(ctx, e)
}

// observeHold tells the Hold hook that l was acquired, and endLocked tells
// it l's end: the lock's context, made here, runs the timer that ends it
// when the lease runs out, whether or not the holder watches.
func (l *Lock) observeHold(ctx context.Context, resource string) {
	done := l.c.cfg.hooks.Hold(ctx, resource)
	if done == nil {
		return
	}
	start, _ := l.c.clock.now()
	l.Context()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held = func() {
		e := Event{Outcome: holdOutcome(l.cause), Took: l.endedAt.Sub(start), Renewed: l.renewer != nil}
		if l.cause != errUnlocked {
			e.Err = l.cause
		}
		done(e)
	}
	if l.ended { // at once: the lease ran out before it was handed over
		l.tellHeld()
	}
}

// tellHeld tells the Hold hook, once, that l ended; l.mu is held.
func (l *Lock) tellHeld() {
	if held := l.held; held != nil {
		l.held = nil
		held()
	}
}
