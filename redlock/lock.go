package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/internal/bugs"
	"quorumlock.dev/quorum"
	"quorumlock.dev/redlock/internal/wait"
)

// Lock is a held lock, safe for concurrent use (Unlock and Extend serialised):
// a lease on a majority of masters until [Lock.Until], with a fence under
// [WithFence]. The lease can be lost before Until (see the package doc), so
// storage that must refuse stale writes checks the fence. A nil *Lock holds
// nothing: Unlock, Extend and Renew return [ErrLockNotHeld], Done is closed.
type Lock struct {
	c        *Client
	resource string
	key      string
	keys     []string // {key}, for the scripts
	key1     [1]string
	arg1     [1]any
	token    string
	args     []any // {token}, for the release script
	fence    uint64
	fenced   bool
	multi    []string      // the resources of a lock on several (sorted), nil for one
	fences   []uint64      // their fences, in the same order; nil for one resource
	round    *quorum.Round // the acquiring round; releases wait for its calls
	// What a wait policy changed in how the keys are released: the
	// refusals of the attempt set nothing (fair_lock.lua), so its release
	// skips those masters; a lost attempt's undo on the masters that agreed
	// (fair_undo.lua); the release of the held lock (handoff.lua, removing
	// entries); nil: release.lua with the token.
	refusedClean bool
	undo         *wait.Script
	releaseBy    *wait.Script
	kept         any           // the wait policy's own state of a held lock (fair: a pass in-process)
	ttl          time.Duration // of the keys last set: a release retried in the background stops once it passed

	op opLock // serialises Unlock and Extend

	mu        sync.Mutex
	until     time.Time     // end of the lease on the monotonic clock
	untilBoot time.Duration // the same end on the clock that counts suspend
	ended     bool          // released, or known lost
	endedAt   time.Time     // when it ended (monotonic); Until is never later
	cause     error         // why it ended: errUnlocked, or one wrapping ErrLockLost
	// The lock's own context, not a caller's: made by the first Context or
	// Done, so that a holder that never asks pays nothing for it.
	ctx      context.Context
	cancel   context.CancelCauseFunc
	timer    *time.Timer
	unlocked bool
	renewer  chan struct{} // closed when the renewer of Renew has stopped; nil without one

	progress atomic.Uint64 // advanced by Progress, read by the renewer
	held     func()        // tells the Hold hook of the lock's end; nil without one
}

// opLock is a mutex whose waiters wait on a channel: Unlock waits on it
// while an Extend is in a round of master calls, and a goroutine blocked on
// a channel is durably blocked in testing/synctest, where one blocked on a
// sync.Mutex is not and stops the bubble's clock (the simulator hung on
// it: an Unlock behind a renewer's Extend whose calls waited for virtual
// time). The zero value is unlocked.
type opLock struct {
	once sync.Once
	ch   chan struct{}
}

func (o *opLock) lock() {
	o.once.Do(func() { o.ch = make(chan struct{}, 1) })
	o.ch <- struct{}{}
}

func (o *opLock) unlock() { <-o.ch }

func newLock(c *Client, resource, token string) *Lock {
	l := &Lock{c: c, resource: resource, key: "lock:" + resource, token: token}
	// One allocation for the Lock and its usual one key and one argument.
	l.key1[0], l.arg1[0] = l.key, token
	l.keys, l.args = l.key1[:], l.arg1[:]
	return l
}

// Resource is the name the lock was taken on; for a lock on several
// resources ([Client.LockAll]), the first of [Lock.Resources].
func (l *Lock) Resource() string {
	if l == nil {
		return ""
	}
	return l.resource
}

// Resources are the names the lock was taken on, sorted: one for
// [Client.Lock], all of them for [Client.LockAll]. The slice is the caller's.
func (l *Lock) Resources() []string {
	if l == nil {
		return nil
	}
	if l.multi == nil {
		return []string{l.resource}
	}
	return slices.Clone(l.multi)
}

// Fences returns a fence for each of [Lock.Resources], in their order, and
// true; nil and false without [WithFence].
func (l *Lock) Fences() ([]uint64, bool) {
	switch {
	case l == nil || !l.fenced:
		return nil, false
	case l.fences == nil:
		return []uint64{l.fence}, true
	}
	return slices.Clone(l.fences), true
}

// Token is the random value that marks this holder's keys on the masters.
// A lock passed on in-process between waiters of one client (see
// [WithFairness]) keeps its predecessor's token: the keys are the same.
// Storage that must tell holders apart uses the fence, which each holder
// mints anew.
func (l *Lock) Token() string {
	if l == nil {
		return ""
	}
	return l.token
}

// Fence returns the lock's fencing token and true, or 0 and false when the
// client was built without [WithFence].
func (l *Lock) Fence() (uint64, bool) {
	if l == nil {
		return 0, false
	}
	return l.fence, l.fenced
}

// Until is the end of the lease: the start of the acquiring (or last
// extending) attempt plus the TTL, less the drift allowance, on the local
// monotonic clock, or earlier after a suspend of the machine. A lock passed on
// in-process ([WithFairness]) keeps its predecessor's Until, at least three
// quarters of its own lease away. Once the lock has ended (Unlock, a failed
// Extend or renewal) Until is no later than when it ended: the masters may
// have let it go then. A restart seen by the guard ([WithRestartGuard])
// does not end a held lock: it protects later acquisitions. Work under the
// lock must end before Until.
func (l *Lock) Until() time.Time {
	if l == nil {
		return time.Time{}
	}
	l.mu.Lock()
	until, boot := l.until, l.untilBoot
	if l.ended && l.endedAt.Before(until) {
		until = l.endedAt
	}
	l.mu.Unlock()
	now, nowBoot := l.c.clock.now()
	if left := boot - nowBoot; left < until.Sub(now) && !bugs.MonotonicLeaseOnly {
		return now.Add(left)
	}
	return until
}

// over reports whether a lease ending at until (monotonic) and boot (on the
// clock that counts suspend) has run out.
func (l *Lock) over(until time.Time, boot time.Duration) bool { return overAt(l.c.clock, until, boot) }

// overAt is over on clock.
func overAt(clock clock, until time.Time, boot time.Duration) bool {
	now, nowBoot := clock.now()
	return !now.Before(until) || nowBoot >= boot && !bugs.MonotonicLeaseOnly
}

// abandon frees the keys of a lock nobody will hold (one handed to a
// waiter that will not take it), in the background, and then calls after
// when it is not nil: its waiter tries again once the masters that
// answered have let the keys go.
func (l *Lock) abandon(ctx context.Context, after func()) {
	l.mu.Lock()
	l.ended, l.cause = true, errUnlocked
	l.mu.Unlock()
	l.c.background(func() {
		l.releaseAll(context.WithoutCancel(ctx), l.round, nil)
		if after != nil {
			after()
		}
	})
}

// leaseCheck is how often Done's timer looks at the clock that counts
// suspend: after a suspend, Done closes at most this late.
const leaseCheck = time.Second

// left is the time to wait before looking at the lease again.
func (l *Lock) leftLocked() time.Duration {
	now, nowBoot := l.c.clock.now()
	if bugs.MonotonicLeaseOnly {
		return l.until.Sub(now)
	}
	return min(l.until.Sub(now), l.untilBoot-nowBoot, leaseCheck)
}

// Done returns a channel that is closed when the lock ends on this side:
// its validity runs out (within a second when a suspend cut it short),
// Unlock is called, or an Extend fails. It is Context().Done(). A holder
// that selects on Done stops in time; one that does not may outlive its lease.
func (l *Lock) Done() <-chan struct{} {
	return l.Context().Done()
}

// watchLocked makes the lock's context on first use and, while the lock is
// held, the timer that ends it when the lease runs out; l.mu is held.
func (l *Lock) watchLocked() context.Context {
	if l.ctx == nil {
		l.ctx, l.cancel = context.WithCancelCause(context.Background())
		if l.ended {
			l.cancel(l.cause)
		} else {
			l.timer = time.AfterFunc(l.leftLocked(), l.expire)
		}
	}
	return l.ctx
}

func (l *Lock) expire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if left := l.leftLocked(); left > 0 && !l.ended { // extended meanwhile, or a check
		l.timer.Reset(left)
		return
	}
	l.endLocked(errLeaseRanOut)
}

// endLocked marks the lock over for cause and cancels its context; l.mu is
// held. The first cause stays: a lock lost before Unlock stays lost.
func (l *Lock) endLocked(cause error) {
	if l.ended {
		return
	}
	l.ended, l.cause = true, cause
	l.endedAt, _ = l.c.clock.now()
	l.tellHeld()
	if l.timer != nil {
		l.timer.Stop()
	}
	if l.cancel != nil {
		l.cancel(cause)
	}
}

// Unlock releases the lock on every master, each call bounded by the node
// timeout and sent even after ctx ended; it returns once a majority confirmed
// (docs/design.md, "Release and extend"). Errors: [ErrLockNotHeld] (too few held
// our token, or the lock had ended or was released) or [ErrQuorumUnavailable],
// joined with per-master errors. A renewer of [Lock.Renew] has stopped by then.
func (l *Lock) Unlock(ctx context.Context) (err error) {
	if l == nil {
		return errNilLock
	}
	if release := l.c.cfg.hooks.Release; release != nil {
		if done := release(ctx, l.resource); done != nil {
			start := time.Now()
			defer func() { done(Event{Outcome: releaseOutcome(err), Err: err, Took: time.Since(start)}) }()
		}
	}
	err = l.unlock(ctx)
	l.mu.Lock()
	stopped := l.renewer
	l.mu.Unlock()
	if stopped != nil {
		// It sees the lock ended at once, or after the Extend it is in.
		<-stopped
	}
	return err
}

// unlock is Unlock without waiting for the renewer, which calls it.
func (l *Lock) unlock(ctx context.Context) error {
	l.op.lock()
	defer l.op.unlock()
	l.mu.Lock()
	if l.unlocked {
		l.mu.Unlock()
		return fmt.Errorf("%w: already unlocked", ErrLockNotHeld)
	}
	l.unlocked = true
	until, untilBoot := l.until, l.untilBoot
	lost := l.cause // the lock ended before this Unlock: nil when it had not
	l.endLocked(errUnlocked)
	l.mu.Unlock()
	done, after, err := l.c.policy.Unlock(ctx, l, until, untilBoot, lost)
	if done {
		return err
	}
	if after != nil {
		defer after()
	}

	// A majority that confirmed settles Unlock: a slow master is then
	// released in the background, not waited for.
	released := l.releaseAll(ctx, l.round, func(rs []release) bool {
		held := 0
		for i := range rs {
			if rs[i].state.Load() == releasedHeld {
				held++
			}
		}
		return held >= l.c.quorum
	})
	var held, failed int
	for i := range released {
		switch released[i].state.Load() {
		case releasedHeld:
			held++
		case releasedNotOurs:
		default: // failed, or still running
			failed++
		}
	}
	switch {
	case lost != nil:
		// Whatever the masters still held: the holder was told the lock
		// had ended (Done, Context), and may have stopped its work.
		return l.releaseError(fmt.Errorf("%w: the lock had ended before Unlock: %w", ErrLockNotHeld, lost), released)
	case held >= l.c.quorum:
		// Failures of the rest are logged by the release itself.
		return nil
	case held+failed >= l.c.quorum:
		return l.releaseError(ErrQuorumUnavailable, released)
	}
	return l.releaseError(ErrLockNotHeld, released)
}

// releaseError joins kind with the error of each master whose release
// failed or had not finished.
func (l *Lock) releaseError(kind error, released []release) error {
	errs := []error{kind}
	for i := range released {
		switch released[i].state.Load() {
		case releaseFailed:
			errs = append(errs, l.c.masterError(i, "release", released[i].e))
		case releasePending:
			errs = append(errs, l.c.masterError(i, "release", quorum.ErrTimeout))
		}
	}
	return errors.Join(errs...)
}

// release is what the compare-and-delete did on one master. state is set
// last, so a reader that sees it set also sees e.
type release struct {
	state  atomic.Int32
	e      error
	holder string // releasedNotOurs: the value the key held instead, if any
}

const (
	releasePending  = iota // still running, or not waited for
	releasedHeld           // our token was there and is gone
	releasedNotOurs        // the key was gone or held another token
	releaseFailed
)

func (r *release) err() error {
	if r.state.Load() == releaseFailed {
		return r.e
	}
	return nil
}

// releaseAll runs the compare-and-delete on every master of round, each
// after its call in round returned, with a context the caller's
// cancellation does not reach, each bounded by the node timeout. It waits
// for the masters that answered round in time (those whose call failed, in
// time or late, are released in the background), unless enough says that
// the releases so far settle the outcome. A failed release is logged at Warn: the key is left to
// expire.
func (l *Lock) releaseAll(ctx context.Context, round *quorum.Round, enough func([]release) bool) []release {
	return l.releaseAfter(ctx, round, enough, false)
}

// releaseAfter is releaseAll after round; extend says that round was a
// failed Extend's, not the acquisition: every master is then released,
// those the Extend never reached too (the acquisition's keys are there).
func (l *Lock) releaseAfter(ctx context.Context, round *quorum.Round, enough func([]release) bool, extend bool) []release {
	c := l.c
	out := make([]release, len(c.masters))
	var settled func() bool
	if enough != nil {
		settled = func() bool { return enough(out) }
	}
	detached := context.WithoutCancel(ctx)
	if bugs.CleanupOnCallerCtx {
		detached = ctx
	}
	round.UndoUntil(detached, c.cfg.nodeTimeout, func(ctx context.Context, i int) {
		agreed, err := round.Result(i)
		if !extend && err == nil && !agreed && l.refusedClean {
			// fair_lock.lua refused: it set nothing, and a key of another
			// type would have failed it.
			out[i].state.Store(releasedNotOurs)
			return
		}
		if err == nil && agreed && l.undo != nil {
			l.releaseWith(ctx, i, &out[i], l.undo.Script, l.undo.Args)
			return
		}
		if err != nil {
			if !extend && (c.neverSent(i, err) && l.releaseBy == nil || bugs.TimedOutKeysKept) {
				// Nothing reached this master, so there is nothing to take
				// back. Unless a policy's release removes more than the key:
				// the queue entries of a fair chain's waiters may be there
				// (TestChainReleaseReachesStuckMasters).
				out[i].state.Store(releasedNotOurs)
				return
			}
			if enough != nil {
				// A master whose acquiring call failed may have answered
				// since (a pause that ended, a timeout of the past): its
				// release counts like any other, and a majority that
				// confirmed without it still returns at once.
				l.releaseOne(ctx, i, &out[i])
				return
			}
			// A master in trouble: release it without holding up the caller.
			c.background(func() {
				ctx, cancel := context.WithTimeout(detached, c.cfg.nodeTimeout)
				defer cancel()
				l.releaseOne(ctx, i, &out[i])
			})
			return
		}
		l.releaseOne(ctx, i, &out[i])
	}, settled)
	return out
}

// releaser is l's release: release.lua with the token, unless a wait
// policy set another (releaseBy).
func (l *Lock) releaser() (*driver.Script, []any) {
	if l.releaseBy != nil {
		return l.releaseBy.Script, l.releaseBy.Args
	}
	return releaseScript, l.args
}

// releaseOne runs l's release on master i and records it in r.
func (l *Lock) releaseOne(ctx context.Context, i int, r *release) {
	script, args := l.releaser()
	l.releaseWith(ctx, i, r, script, args)
}

// releaseWith is releaseOne with script.
func (l *Lock) releaseWith(ctx context.Context, i int, r *release, script *driver.Script, args []any) {
	v, err := l.c.masters[i].Eval(ctx, script, l.keys, args...)
	n, isInt := v.(int64)
	switch {
	case err == nil && !isInt:
		// release.lua names the value a key held instead of the token.
		s, ok := v.(string)
		if !ok {
			r.e = fmt.Errorf("%w: %v (%T) from a release", driver.ErrUnexpectedReply, v, v)
			r.state.Store(releaseFailed)
			return
		}
		r.holder = s
		r.state.Store(releasedNotOurs)
	case err != nil:
		r.e = err
		r.state.Store(releaseFailed)
		if !driver.Replied(err) && !bugs.NoReleaseRetry && !(bugs.CleanupOnCallerCtx && ctx.Err() != nil) {
			// The key may be there: tried again until the master
			// answers or the key has expired (cleanup.go).
			l.c.cfg.logger.Info("redlock: release got no reply; retrying in the background", "master", l.c.addrs[i], "resource", l.resource, "err", err)
			l.c.retryRelease(l, i, script, args)
		} else if !isWrongType(err) {
			l.c.cfg.logger.Warn("redlock: release failed; the key is left to expire", "master", l.c.addrs[i], "resource", l.resource, "err", err)
		}
	case n == 1:
		r.state.Store(releasedHeld)
	default:
		r.state.Store(releasedNotOurs)
	}
}

// Extend gives the lock a new lease of ttl from the start of the call if a
// majority still held our token before the lease ran out and validity is left
// (start it at least a node timeout before [Lock.Until]). A failure, or an ended
// ctx (nothing sent, ctx.Err() wrapped returned), ends the lock: Done closes, the
// cause wraps [ErrLockLost], and the lock's keys are released (on a master
// whose Extend call is still out, once it returns: in the background).
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if l == nil {
		return errNilLock
	}
	return l.extend(ctx, ttl, nil)
}

// extend is Extend; failed, when not nil, hears of a failure that ends the
// lock before the lock's context is cancelled.
func (l *Lock) extend(ctx context.Context, ttl time.Duration, failed func(error)) (err error) {
	c := l.c
	if err := c.check(l.resource, ttl); err != nil {
		return err
	}
	if extend := c.cfg.hooks.Extend; extend != nil {
		if done := extend(ctx, l.resource); done != nil {
			start := time.Now()
			defer func() { done(Event{Outcome: extendOutcome(err), Err: err, Took: time.Since(start)}) }()
		}
	}
	l.op.lock()
	defer l.op.unlock()
	l.mu.Lock()
	over, until, untilBoot := l.ended, l.until, l.untilBoot
	l.mu.Unlock()
	if over {
		return fmt.Errorf("%w: the lock has ended", ErrLockNotHeld)
	}
	if l.over(until, untilBoot) {
		err := fmt.Errorf("%w: the lease ran out at %v", ErrLockNotHeld, until.Format(time.RFC3339Nano))
		if failed != nil {
			failed(err)
		}
		l.lose(errLeaseRanOut)
		return err
	}
	ttl = ttl.Truncate(time.Millisecond)
	c.watcher.Issued(ttl)
	ms := ttl.Milliseconds()
	ended := ctx.Err()
	l.ttl = max(l.ttl, ttl) // a failed Extend may have set it on some masters
	start, boot := c.clock.now()
	round := c.group.Do(ctx, func(ctx context.Context, i int) (bool, error) {
		n, err := call(c, ctx, i, func(ctx context.Context, m driver.Conn) (int64, error) {
			return wait.EvalInt(ctx, m, extendScript, l.keys, l.token, ms)
		})
		return n == 1, err
	})
	err = l.extended(ctx, round, ended, ttl, start, boot, until, untilBoot)
	if err != nil {
		if failed != nil {
			failed(err)
		}
		l.lose(fmt.Errorf("%w: Extend failed: %w", ErrLockLost, err))
		// The lock ended: its keys must not outlive it, whatever this
		// Extend reached (one whose context had ended sent nothing).
		if !bugs.ExtendKeepsKeys {
			l.releaseAfter(ctx, round, nil, true)
		}
	}
	return err
}

// extended decides an Extend's round for ttl, begun at start (boot on the
// clock that counts suspend) with ctx's error ended, of a lease that ended
// at until (untilBoot): nil and the new lease kept, or why it failed.
func (l *Lock) extended(ctx context.Context, round *quorum.Round, ended error, ttl time.Duration, start time.Time, boot time.Duration, until time.Time, untilBoot time.Duration) error {
	c := l.c
	lease := c.lease(ttl)
	deadline, deadlineBoot := start.Add(lease), boot+lease
	switch {
	case round.Count(quorum.Agreed) < c.quorum && ended != nil:
		// go-redis sent nothing: neither a holder nor a master is to blame.
		return fmt.Errorf("redlock: Extend not attempted: the context had ended: %w", ended)
	case round.Count(quorum.Agreed) < c.quorum:
		var errs []error
		for i := range c.masters {
			if e := round.Err(i); e != nil {
				errs = append(errs, c.masterError(i, "extend", e))
			}
		}
		return c.classify(ctx, round.Unanswered(), ErrLockNotHeld, errs)
	case l.over(until, untilBoot) && !bugs.ExtendOutcomeOnDone:
		// Whether or not Done was asked for: the old lease ended first.
		return fmt.Errorf("%w: the lease ran out during Extend", ErrLockNotHeld)
	case l.over(deadline, deadlineBoot):
		now, _ := c.clock.now()
		return fmt.Errorf("%w: majority extended after %v, no validity left of ttl %v", ErrLockNotHeld, now.Sub(start), ttl)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		// Done's timer ended it after the check above: the holder was
		// told, and a lock that ended stays ended.
		return fmt.Errorf("%w: the lease ran out during Extend", ErrLockNotHeld)
	}
	l.until, l.untilBoot, l.ttl = deadline, deadlineBoot, ttl
	if l.timer != nil {
		l.timer.Reset(l.leftLocked())
	}
	return nil
}

func (l *Lock) lose(cause error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.endLocked(cause)
}
