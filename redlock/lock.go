package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"quorumlock.dev/clockdrift"
	"quorumlock.dev/quorum"
)

// Lock is a held lock: a lease on a majority of masters until [Lock.Until],
// with a fencing token when the client was built [WithFence]. It is safe for
// concurrent use; Unlock and Extend are serialised.
//
// The lease is an efficiency lock: it can be lost before Until when the
// process pauses, a master's clock jumps or a master restarts empty (see
// the package documentation). Storage that must not take a stale write
// checks the fence, not the lease.
type Lock struct {
	c        *Client
	resource string
	key      string
	keys     []string // {key}, for the scripts
	token    string
	args     []any // {token}, for the release script
	fence    uint64
	fenced   bool
	round    *quorum.Round // the acquiring round; releases wait for its calls

	op sync.Mutex // serialises Unlock and Extend

	mu       sync.Mutex
	until    time.Time
	ended    bool // released, or known lost
	done     chan struct{}
	timer    *time.Timer
	unlocked bool
}

func newLock(c *Client, resource, token string) *Lock {
	key := "lock:" + resource
	return &Lock{c: c, resource: resource, key: key, keys: []string{key}, token: token, args: []any{token}}
}

// Resource is the name the lock was taken on.
func (l *Lock) Resource() string { return l.resource }

// Token is the random value that marks this holder's keys on the masters.
func (l *Lock) Token() string { return l.token }

// Fence returns the lock's fencing token and true, or 0 and false when the
// client was built without [WithFence].
func (l *Lock) Fence() (uint64, bool) { return l.fence, l.fenced }

// Until is the end of the lease on the local monotonic clock: the start of
// the acquiring (or last extending) attempt plus the TTL, less the drift
// allowance. Work that must finish under the lock must finish before Until.
func (l *Lock) Until() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// Done returns a channel that is closed when the lock ends on this side:
// its validity runs out, Unlock is called, or an Extend fails. A holder that
// selects on Done stops in time; one that does not may outlive its lease.
func (l *Lock) Done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil {
		// Made on first use, so holders that never ask pay nothing for it.
		l.done = make(chan struct{})
		if l.ended {
			close(l.done)
		} else {
			l.timer = time.AfterFunc(time.Until(l.until), l.expire)
		}
	}
	return l.done
}

func (l *Lock) expire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if left := time.Until(l.until); left > 0 && !l.ended { // extended meanwhile
		l.timer.Reset(left)
		return
	}
	l.endLocked()
}

// endLocked marks the lock over and closes Done; l.mu is held.
func (l *Lock) endLocked() {
	if l.ended {
		return
	}
	l.ended = true
	if l.timer != nil {
		l.timer.Stop()
	}
	if l.done != nil {
		close(l.done)
	}
}

// Unlock releases the lock with a compare-and-delete on every master at
// once, each bounded by the node timeout; it is sent even when ctx has
// already ended, so a deferred Unlock still frees the masters. A master whose
// acquiring SET is still in flight is released after that SET returns.
// Unlock returns as soon as a majority confirmed the release; the remaining
// masters are released in the background, so a slow master does not hold up
// the caller.
//
// It returns nil when a majority of masters still held our token: the lease
// was intact to the end. It returns [ErrLockNotHeld] when fewer did (the
// lease had lapsed, and another holder may have had the lock meanwhile) or
// when the lock was already released, and [ErrQuorumUnavailable] when too
// many masters failed to tell; either joined with the per-master errors.
func (l *Lock) Unlock(ctx context.Context) error {
	l.op.Lock()
	defer l.op.Unlock()
	l.mu.Lock()
	if l.unlocked {
		l.mu.Unlock()
		return fmt.Errorf("%w: already unlocked", ErrLockNotHeld)
	}
	l.unlocked = true
	l.endLocked()
	l.mu.Unlock()

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
	var errs []error
	for i := range released {
		switch released[i].state.Load() {
		case releasedHeld:
			held++
		case releasedNotOurs:
		case releaseFailed:
			failed++
			errs = append(errs, &MasterError{Addr: l.c.addrs[i], Op: "release", Err: released[i].err()})
		default:
			failed++
			errs = append(errs, &MasterError{Addr: l.c.addrs[i], Op: "release", Err: quorum.ErrTimeout})
		}
	}
	switch {
	case held >= l.c.quorum:
		if failed > 0 {
			l.c.cfg.logger.Warn("redlock: unlock left keys to expire", "resource", l.resource, "err", errors.Join(errs...))
		}
		return nil
	case held+failed >= l.c.quorum:
		return errors.Join(append([]error{ErrQuorumUnavailable}, errs...)...)
	}
	return errors.Join(append([]error{ErrLockNotHeld}, errs...)...)
}

// release is what the compare-and-delete did on one master. state is set
// last, so a reader that sees it set also sees e.
type release struct {
	state atomic.Int32
	e     error
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
// after its acquiring call returned, with a context the caller's
// cancellation does not reach, each bounded by the node timeout. It waits
// for the masters whose acquiring call returns before the round's deadline,
// unless enough is set and says that the releases so far settle the
// outcome; the rest are released in the background.
func (l *Lock) releaseAll(ctx context.Context, round *quorum.Round, enough func([]release) bool) []release {
	out := make([]release, len(l.c.masters))
	detached := context.WithoutCancel(ctx)
	var settled func() bool
	if enough != nil {
		settled = func() bool { return enough(out) }
	}
	round.UndoUntil(l.c.cfg.nodeTimeout, func(i int) {
		if round.Answer(i) == quorum.Failed && neverSent(round.Err(i)) {
			// Nothing reached this master, so there is nothing to take back;
			// a release would only wait on the same dead connection.
			out[i].state.Store(releasedNotOurs)
			return
		}
		held, err := l.release(detached, i)
		switch {
		case err != nil:
			out[i].e = err
			out[i].state.Store(releaseFailed)
		case held:
			out[i].state.Store(releasedHeld)
		default:
			out[i].state.Store(releasedNotOurs)
		}
	}, settled)
	return out
}

// neverSent reports an error that proves the command never left the
// client: the connection could not even be dialled.
func neverSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// release runs the compare-and-delete on master i and reports whether our
// token was there.
func (l *Lock) release(ctx context.Context, i int) (bool, error) {
	n, err := releaseScript.Run(ctx, l.c.masters[i], l.keys, l.args...).Int64()
	return n == 1, err
}

// Extend gives the lock a new lease of ttl, counted from the start of this
// call, with a compare-and-pexpire on every master. It succeeds only when a
// majority still held our token and validity is left of the new lease. It
// refuses with [ErrLockNotHeld] once the current lease has run out: a lapsed
// lock is not brought back. A failed Extend ends the lock: Done is closed,
// and the caller should stop its work and Unlock.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	c := l.c
	if err := c.check(l.resource, ttl); err != nil {
		return err
	}
	l.op.Lock()
	defer l.op.Unlock()
	l.mu.Lock()
	over, until := l.ended, l.until
	l.mu.Unlock()
	if over {
		return fmt.Errorf("%w: the lock has ended", ErrLockNotHeld)
	}
	if !time.Now().Before(until) {
		l.lose()
		return fmt.Errorf("%w: the lease ran out at %v", ErrLockNotHeld, until.Format(time.RFC3339Nano))
	}
	ttl = ttl.Truncate(time.Millisecond)
	ms := ttl.Milliseconds()
	start := time.Now()
	round := quorum.Do(ctx, len(c.masters), c.quorum, c.cfg.nodeTimeout, func(ctx context.Context, i int) (bool, error) {
		n, err := extendScript.Run(ctx, c.masters[i], l.keys, l.token, ms).Int64()
		return n == 1, err
	})
	deadline := start.Add(ttl - clockdrift.Allowance(ttl, c.cfg.driftFactor, c.cfg.driftConstant))
	if round.Agreed < c.quorum {
		l.lose()
		var errs []error
		for i := range c.masters {
			if err := round.Err(i); err != nil {
				errs = append(errs, &MasterError{Addr: c.addrs[i], Op: "extend", Err: err})
			}
		}
		return c.classify(ctx, round, round.Unanswered(), ErrLockNotHeld, errs)
	}
	if !time.Now().Before(deadline) {
		l.lose()
		return fmt.Errorf("%w: majority extended after %v, no validity left of ttl %v", ErrLockNotHeld, time.Since(start), ttl)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended { // the old lease ran out while we waited
		return fmt.Errorf("%w: the lease ran out during Extend", ErrLockNotHeld)
	}
	l.until = deadline
	if l.timer != nil {
		l.timer.Reset(time.Until(deadline))
	}
	return nil
}

func (l *Lock) lose() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.endLocked()
}
