package fair

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/internal/bugs"
	"quorumlock.dev/quorum"
	"quorumlock.dev/redlock/internal/wait"
)

// Direct handoff: when the head of a resource's queue is a waiter of the
// same Client, Unlock hands the lock to it in its own round:
// scripts/handoff.lua, given the waiter's id and a new token, sets the key
// to that token on every master where the waiter is the head, instead of
// leaving the reservation for the waiter to take in a round of its own.
// The waiter is given a Lock over the masters that took the new token,
// with a lease counted from the start of that round, like any acquisition.
// One round and no message per handoff instead of two rounds and a
// published release. Where the head is a waiter of another client, the
// key goes to the queue as before. docs/design.md ("Fair handoff") says
// why it is safe.

// errNotHanded is the call of a master that did not hold the releaser's
// key when its handoff round began: it is released the usual way instead.
var errNotHanded = fmt.Errorf("%w: master not in the releaser's majority", wait.ErrNotAsked)

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
func (p *Policy[L]) passable(q *Waiter[L], until time.Time, untilBoot time.Duration) bool {
	lease := p.c.Lease(q.TTL)
	now, boot := p.c.Now()
	left := min(until.Sub(now), untilBoot-boot)
	return left >= lease/4*3
}

// staleBatch is how many entries a chain of passes leaves queued before
// they are removed in the background.
const staleBatch = 16

// passOn is Unlock when q, the next waiter of this client, is covered (no
// waiter of another client is ahead of it, see Line.Pick) and the
// lease has most of q's TTL left: the lock passes to q in-process, with no
// round. q's Lock has l's token, keys and lease (its Until is l's); it
// mints its own fence. The masters
// see nothing: their keys hold the same token until the same expiry, so
// mutual exclusion is l's, and l has ended before q's Lock exists. Waiters
// of other clients keep their place: q was ahead of them by its stamp.
func (p *Policy[L]) passOn(ctx context.Context, l L, q *Waiter[L], until time.Time, untilBoot time.Duration) error {
	c := p.c
	next := c.Pass(l, until, untilBoot)
	// The entries of the waiters of this chain of passes stay queued (q's
	// is added by deliver, when q has one): the release that ends the
	// chain removes them, or a batch in the background once there are
	// enough. Not q's at once: an attempt of q's may still be putting it
	// there.
	stale := p.Stale(l)
	if len(stale) >= staleBatch {
		p.leave(ctx, []string{q.Key}, strs(stale), q.TTL, nil)
		stale = nil
	}
	p.setStale(next, stale)
	p.passed.Add(1)
	now, _ := c.Now()
	c.Attempted(0, until.Sub(now))
	p.deliver(ctx, q, next)
	return nil
}

// deliver ends a handoff to q of l, the lock it took: the waiter listed
// after q is then next in line (package fair). A q that left the line
// meanwhile does not take it: l is freed.
func (p *Policy[L]) deliver(ctx context.Context, q *Waiter[L], l L) {
	ch := p.chainOf(l)
	if !p.line.Deliver(q, l, ch != nil, func() { p.setStale(l, append(ch.stale[:len(ch.stale):len(ch.stale)], q.Entry)) }) {
		p.c.Abandon(ctx, l, nil)
	}
}

// handOff is Unlock when q, a waiter of this client, may take the lock:
// one round of handoff.lua on the masters where l's acquiring call
// returned (in its round or after it), which releases l and sets q's new
// key where q is the head of the queue and the key held l's token or was
// free for the head. The masters where l's call failed or is still running
// get the plain release once it has returned, in the background. Unlock's
// outcome counts the masters where l's token was released, handed or not.
func (p *Policy[L]) handOff(ctx context.Context, l L, q *Waiter[L]) error {
	c := p.c
	detached := context.WithoutCancel(ctx)
	h := p.newHandoff(l, q)
	next := h.next
	c.Issued(h.ttl)
	start, boot := c.Now()
	round := c.Do(detached, h.hand)
	lease := c.Lease(h.ttl)
	deadline, deadlineBoot := start.Add(lease), boot+lease
	c.Hold(next, round, deadline, deadlineBoot, h.ttl)
	c.Round(l).UndoUntil(detached, c.NodeTimeout(), h.release, func() bool { return true })

	switch got := round.Count(quorum.Agreed); {
	case got >= c.Quorum() && !c.Over(deadline, deadlineBoot):
		p.handed.Add(1)
		now, _ := c.Now()
		c.Attempted(now.Sub(start), deadline.Sub(now))
		p.deliver(ctx, q, next)
	default:
		// Too few counted to hold. Masters that took q's token may be among
		// those not counted (quarantined, a reply lost after the script
		// ran, a call that outlives the round): their keys would stay for
		// q's whole TTL with a token nobody holds. Free them, then q tries
		// at once.
		p.line.Withdraw(q)
		c.Abandon(ctx, next, q.Nudge)
	}
	return h.outcome(round)
}

// handoff is one Unlock's handoff of l to q: who releases each master,
// and what each said.
type handoff[L Lock] struct {
	p    *Policy[L]
	l    L
	next L // q's, with a new token
	q    *Waiter[L]
	ttl  time.Duration
	args []any // handoff.lua's: l's token, q, next's token and TTL, the entries to remove first (see passOn)
	who  []atomic.Int32
	// handoff.lua's (or release.lua's) reply + 1 per master, from the
	// handoff's call or the plain release; 0: none yet, -1: failed.
	replies  []atomic.Int64
	answered chan struct{} // one per call that returned
}

// newHandoff prepares the handoff of l to q. The masters where l's
// acquiring call returned are the round's, decided before it starts. A
// call of l's that failed or is still running may yet set l's key: that
// master gets the plain release, after the call (release).
func (p *Policy[L]) newHandoff(l L, q *Waiter[L]) *handoff[L] {
	c := p.c
	n := c.Masters()
	next := c.NewLock(l.Resource(), wait.NewToken(c.Stream()))
	h := &handoff[L]{p: p, l: l, next: next, q: q, ttl: q.TTL,
		who: make([]atomic.Int32, n), replies: make([]atomic.Int64, n), answered: make(chan struct{}, n)}
	for i := range n {
		if _, err, ok := c.Round(l).Returned(i); ok && err == nil {
			h.who[i].Store(byHandoff)
		}
	}
	h.args = append([]any{l.Token(), q.ID, next.Token(), q.TTL.Milliseconds()}, strs(p.Stale(l))...)
	return h
}

// hand is master i's call of the handoff round: handoff.lua.
func (h *handoff[L]) hand(ctx context.Context, i int) (bool, error) {
	c := h.p.c
	if h.who[i].Load() != byHandoff {
		return false, errNotHanded
	}
	n, err := wait.Call(c, ctx, i, func(ctx context.Context, m driver.Conn) (int64, error) {
		return wait.EvalInt(ctx, m, HandoffScript, c.Keys(h.l), h.args...)
	})
	if err != nil {
		h.replies[i].Store(-1)
		if !driver.Replied(err) && !bugs.NoReleaseRetry {
			// The call may not have run, and our key be there still:
			// its release is tried again. A key the call set for q is
			// next's, and goes with it.
			c.RetryRelease(h.l, i)
		}
	} else {
		h.replies[i].Store(n + 1)
	}
	h.answered <- struct{}{}
	return c.Vote(i, n == handedOver || n == handedFree, err)
}

// release is the plain release of master i, not in the handoff round,
// once l's acquiring call there returned.
func (h *handoff[L]) release(ctx context.Context, i int) {
	c := h.p.c
	if !h.who[i].CompareAndSwap(undecided, byRelease) {
		return
	}
	if _, err := c.Round(h.l).Result(i); err != nil && c.NeverSent(i, err) && !h.p.carriesEntries(h.l) {
		h.replies[i].Store(0 + 1) // nothing to release
		h.answered <- struct{}{}
		return
	}
	switch held, err := c.ReleaseOne(ctx, h.l, i); {
	case err != nil:
		h.replies[i].Store(-1)
	case held:
		h.replies[i].Store(1 + 1)
	default:
		h.replies[i].Store(0 + 1)
	}
	h.answered <- struct{}{}
}

// outcome is Unlock's outcome of a handoff round: it waits, at most
// until the round's calls end, until the releases that held our token make
// a majority or can no longer.
func (h *handoff[L]) outcome(round *quorum.Round) error {
	c := h.p.c
	var timer *time.Timer
	for {
		held, failed, open := 0, 0, 0
		for i := range c.Masters() {
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
		case held >= c.Quorum():
			return nil
		case open > 0 && held+open >= c.Quorum():
			if timer == nil {
				timer = time.NewTimer(c.NodeTimeout())
				defer timer.Stop()
			}
			select {
			case <-h.answered:
				continue
			case <-timer.C:
			}
			failed += open
		}
		return h.failure(round, held+failed >= c.Quorum())
	}
}

// failure is the error of a handoff whose releases did not find our token
// on a majority: the masters could not say (unavailable), or they said so.
func (h *handoff[L]) failure(round *quorum.Round, unavailable bool) error {
	c, errs := h.p.c, h.p.errs
	kind := errs.LockNotHeld
	if unavailable {
		kind = errs.QuorumUnavailable
	}
	all := []error{kind}
	for i := range c.Masters() {
		if h.who[i].Load() != byHandoff {
			continue
		}
		_, err, ok := round.Returned(i)
		switch {
		case !ok:
			err = quorum.ErrTimeout
		case errors.Is(err, errs.Quarantined):
			err = nil // released all the same
		}
		if err != nil {
			all = append(all, c.MasterError(i, "release", err))
		}
	}
	return errors.Join(all...)
}
