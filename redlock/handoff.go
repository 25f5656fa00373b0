package redlock

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/internal/bugs"
	"quorumlock.dev/quorum"
	"quorumlock.dev/redlock/internal/fair"
)

// Direct handoff ([WithFairness]): when the head of a resource's queue is a
// waiter of the same Client, Unlock hands the lock to it in its own round:
// scripts/handoff.lua, given the waiter's id and a new token, sets the key to that
// token on every master where the waiter is the head, instead of leaving
// the reservation for the waiter to take in a round of its own. The waiter
// is given a Lock over the masters that took the new token, with a lease
// counted from the start of that round, like any acquisition. One round and
// no message per handoff instead of two rounds and a published release.
// Where the head is a waiter of another client, the key goes to the queue
// as before. docs/design.md ("Fair handoff") says why it is safe.

// errNotHanded is the call of a master that did not hold the releaser's
// key when its handoff round began: it is released the usual way instead.
var errNotHanded = errors.New("redlock: master not in the releaser's majority")

// handoff.lua's replies, besides 0 (not ours, not handed)
// and 1 (released, not handed).
const (
	handedOver = 2 // our key, handed to the waiter
	handedFree = 3 // a free key (absent, or the queue's reservation), handed to the waiter
)

// Who releases a master in a handoff: its round, or the plain release.
const (
	undecided = iota
	byHandoff
	byRelease
)

// passable reports whether a lease that ends at until (untilBoot on the
// clock that counts suspend) has at least three quarters of q's lease left:
// enough to pass it on to q as it is.
func (p *fairPolicy) passable(q *fair.Waiter[*Lock], until time.Time, untilBoot time.Duration) bool {
	lease := p.c.lease(q.TTL)
	now, boot := p.c.clock.now()
	left := min(until.Sub(now), untilBoot-boot)
	return left >= lease/4*3
}

// staleBatch is how many entries a chain of passes leaves queued before
// they are removed in the background.
const staleBatch = 16

// passOn is Unlock when q, the next waiter of this client, is covered (no
// waiter of another client is ahead of it, see fair.Line.Pick) and the
// lease has most of q's TTL left: the lock passes to q in-process, with no
// round. q's Lock has l's token, keys and lease (its Until is l's); it
// mints its own fence. The masters
// see nothing: their keys hold the same token until the same expiry, so
// mutual exclusion is l's, and l has ended before q's Lock exists. Waiters
// of other clients keep their place: q was ahead of them by its stamp.
func (p *fairPolicy) passOn(ctx context.Context, l *Lock, q *fair.Waiter[*Lock], until time.Time, untilBoot time.Duration) error {
	c := p.c
	next := &Lock{c: c, resource: l.resource, key: l.key, keys: l.keys, token: l.token, args: l.args,
		round: l.round, until: until, untilBoot: untilBoot, ttl: l.ttl}
	// The entries of the waiters of this chain of passes stay queued (q's
	// is added by deliver, when q has one): the release that ends the
	// chain removes them, or a batch in the background once there are
	// enough. Not q's at once: an attempt of q's may still be putting it
	// there.
	var stale []string
	if ch := chainOf(l); ch != nil {
		stale = ch.stale
	}
	if len(stale) >= staleBatch {
		p.leave(ctx, []string{q.Key}, strs(stale), q.TTL, nil)
		stale = nil
	}
	setStale(next, stale)
	p.passed.Add(1)
	if attempted := c.cfg.hooks.Attempted; attempted != nil {
		now, _ := c.clock.now()
		attempted(0, until.Sub(now), nil)
	}
	p.deliver(ctx, q, next)
	return nil
}

// deliver ends a handoff to q of l, the lock it took: the waiter listed
// after q is then next in line (package fair). A q that left the line
// meanwhile does not take it: l is freed.
func (p *fairPolicy) deliver(ctx context.Context, q *fair.Waiter[*Lock], l *Lock) {
	ch := chainOf(l)
	if !p.line.Deliver(q, l, ch != nil, func() { setStale(l, append(ch.stale[:len(ch.stale):len(ch.stale)], q.Entry)) }) {
		l.abandonHanded(ctx, nil)
	}
}

// abandonHanded frees the keys of a handed lock nobody will hold, in the
// background, and then calls after when it is not nil: its waiter tries
// again once the masters that answered have let the keys go.
func (l *Lock) abandonHanded(ctx context.Context, after func()) {
	l.mu.Lock()
	l.ended, l.cause = true, errUnlocked
	l.mu.Unlock()
	go func() {
		l.releaseAll(context.WithoutCancel(ctx), l.round, nil)
		if after != nil {
			after()
		}
	}()
}

// handOff is Unlock when q, a waiter of this client, may take the lock:
// one round of handoff.lua on the masters where l's acquiring call
// returned (in its round or after it), which releases l and sets q's new
// key where q is the head of the queue and the key held l's token or was
// free for the head. The masters where l's call failed or is still running
// get the plain release once it has returned, in the background. Unlock's
// outcome counts the masters where l's token was released, handed or not.
func (p *fairPolicy) handOff(ctx context.Context, l *Lock, q *fair.Waiter[*Lock]) error {
	c := p.c
	detached := context.WithoutCancel(ctx)
	h := p.newHandoff(l, q)
	next := h.next
	c.watcher.Issued(h.ttl)
	start, boot := c.clock.now()
	round := c.group.Do(detached, h.hand)
	next.round = round
	lease := c.lease(h.ttl)
	deadline := start.Add(lease)
	next.untilBoot, next.ttl = boot+lease, h.ttl
	l.round.UndoUntil(detached, c.cfg.nodeTimeout, h.release, func() bool { return true })

	switch got := round.Count(quorum.Agreed); {
	case got >= c.quorum && !next.over(deadline, next.untilBoot):
		next.until = deadline
		p.handed.Add(1)
		if attempted := c.cfg.hooks.Attempted; attempted != nil {
			now, _ := c.clock.now()
			attempted(now.Sub(start), deadline.Sub(now), nil)
		}
		p.deliver(ctx, q, next)
	default:
		// Too few counted to hold. Masters that took q's token may be among
		// those not counted (quarantined, a reply lost after the script
		// ran, a call that outlives the round): their keys would stay for
		// q's whole TTL with a token nobody holds. Free them, then q tries
		// at once.
		p.line.Withdraw(q)
		next.abandonHanded(ctx, q.Nudge)
	}
	return h.outcome(round)
}

// handoff is one Unlock's handoff of l to q: who releases each master,
// and what each said.
type handoff struct {
	c     *Client
	l     *Lock
	next  *Lock // q's, with a new token
	q     *fair.Waiter[*Lock]
	ttl   time.Duration
	stale []any // entries to remove first (see passOn)
	who   []atomic.Int32
	// handoff.lua's (or release.lua's) reply + 1 per master, from the
	// handoff's call or the plain release; 0: none yet, -1: failed.
	replies  []atomic.Int64
	answered chan struct{} // one per call that returned
}

// newHandoff prepares the handoff of l to q. The masters where l's
// acquiring call returned are the round's, decided before it starts. A
// call of l's that failed or is still running may yet set l's key: that
// master gets the plain release, after the call (release).
func (p *fairPolicy) newHandoff(l *Lock, q *fair.Waiter[*Lock]) *handoff {
	c := p.c
	n := len(c.masters)
	h := &handoff{c: c, l: l, next: newLock(c, l.resource, c.newToken()), q: q, ttl: q.TTL,
		who: make([]atomic.Int32, n), replies: make([]atomic.Int64, n), answered: make(chan struct{}, n)}
	for i := range n {
		if _, err, ok := l.round.Returned(i); ok && err == nil {
			h.who[i].Store(byHandoff)
		}
	}
	if ch := chainOf(l); ch != nil {
		h.stale = strs(ch.stale)
	}
	return h
}

// hand is master i's call of the handoff round: handoff.lua.
func (h *handoff) hand(ctx context.Context, i int) (bool, error) {
	c, l := h.c, h.l
	if h.who[i].Load() != byHandoff {
		return false, errNotHanded
	}
	n, err := call(c, ctx, i, func(ctx context.Context, m driver.Conn) (int64, error) {
		return evalInt(ctx, m, handoffScript, l.keys, append([]any{l.token, h.q.ID, h.next.token, h.ttl.Milliseconds()}, h.stale...)...)
	})
	if err != nil {
		h.replies[i].Store(-1)
		if !driver.Replied(err) && !bugs.NoReleaseRetry {
			// The call may not have run, and our key be there still:
			// its release is tried again (cleanup.go). A key the call
			// set for q is next's, and goes with it.
			script, args := l.releaser()
			c.retryRelease(l, i, script, args)
		}
	} else {
		h.replies[i].Store(n + 1)
	}
	h.answered <- struct{}{}
	return c.vote(i, n == handedOver || n == handedFree, err)
}

// release is the plain release of master i, not in the handoff round,
// once l's acquiring call there returned.
func (h *handoff) release(ctx context.Context, i int) {
	c, l := h.c, h.l
	if !h.who[i].CompareAndSwap(undecided, byRelease) {
		return
	}
	if _, err := l.round.Result(i); err != nil && c.neverSent(i, err) {
		h.replies[i].Store(0 + 1) // nothing to release
		h.answered <- struct{}{}
		return
	}
	var r release
	l.releaseOne(ctx, i, &r)
	switch r.state.Load() {
	case releasedHeld:
		h.replies[i].Store(1 + 1)
	case releasedNotOurs:
		h.replies[i].Store(0 + 1)
	default:
		h.replies[i].Store(-1)
	}
	h.answered <- struct{}{}
}

// outcome is Unlock's outcome of a handoff round: it waits, at most
// until the round's calls end, until the releases that held our token make
// a majority or can no longer.
func (h *handoff) outcome(round *quorum.Round) error {
	c := h.c
	var timer *time.Timer
	for {
		held, failed, open := 0, 0, 0
		for i := range c.masters {
			switch n := h.replies[i].Load(); {
			case n == 1+1 || n == handedOver+1: // our token was there
				held++
			case n == -1:
				failed++
			case n == 0:
				// The handoff's call or the plain release (after our
				// acquiring call there returns) is still to answer.
				open++
			}
		}
		switch {
		case held >= c.quorum:
			return nil
		case open > 0 && held+open >= c.quorum:
			if timer == nil {
				timer = time.NewTimer(c.cfg.nodeTimeout)
				defer timer.Stop()
			}
			select {
			case <-h.answered:
				continue
			case <-timer.C:
			}
			failed += open
		}
		var errs []error
		for i := range c.masters {
			if h.who[i].Load() != byHandoff {
				continue
			}
			_, err, ok := round.Returned(i)
			switch {
			case !ok:
				err = quorum.ErrTimeout
			case errors.Is(err, errQuarantined):
				err = nil // released all the same
			}
			if err != nil {
				errs = append(errs, c.masterError(i, "release", err))
			}
		}
		kind := ErrLockNotHeld
		if held+failed >= c.quorum {
			kind = ErrQuorumUnavailable
		}
		return errors.Join(append([]error{kind}, errs...)...)
	}
}
