package redlock

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/internal/quorum"
)

// Direct handoff ([WithFairness]): when the head of a resource's queue is a
// waiter of the same Client, Unlock hands the lock to it in its own round:
// release.lua, given the waiter's id and a new token, sets the key to that
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

// release.lua's replies in a handoff, besides 0 (not ours, not handed)
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

// locals are the queued waiters of a Client, by lock key, in queue order,
// and what the last queued attempt on each key saw.
type locals struct {
	mu    sync.Mutex
	m     map[string][]*queued
	views map[string]view
}

// view is what a queued attempt of this client saw of the other clients'
// waiters on a lock: when it began (at, µs on the clock of the arrival
// stamps), every waiter of another client queued on a majority had a stamp
// of foreign or later. A waiter of ours that arrived before at with a
// stamp below foreign is ahead of every other client's waiter that had
// queued by then, and of every one that arrives later: see covered.
type view struct{ at, foreign int64 }

// grantable is what a queued waiter tells a releaser of this client. Its
// fields are guarded by the client's locals.mu.
type grantable struct {
	grant      chan *Lock    // cap 1: a lock handed to us
	wake       chan struct{} // the waiter's: try again at once
	listed     bool          // in locals.m
	granting   bool          // a releaser picked us and has not finished
	attempting bool          // an attempt of ours is running
	attempts   uint64        // attempts started
	pending    bool          // the last attempt left calls that outlived its round
	started    int64         // when the last attempt began, µs on the stamps' clock
	passComing bool          // next in line while a Lock of this client holds: its Unlock will pick us
	toAttempt  bool          // nudged to make its first attempt, not begun yet
	// What a releaser saw when it picked us: an attempt of ours may have
	// put our entry back after the handoff removed it.
	pickAttempts   uint64
	pickAttempting bool
}

// list makes q a waiter that releases of this client may hand the lock to;
// unlist undoes it and frees a lock handed to q that it will not take.
func (c *Client) list(q *queued) {
	c.local.mu.Lock()
	defer c.local.mu.Unlock()
	if q.listed {
		return
	}
	if c.local.m == nil {
		c.local.m = make(map[string][]*queued)
	}
	key := q.keys[0]
	ws := c.local.m[key]
	at, _ := slices.BinarySearchFunc(ws, q, func(a, b *queued) int { return strings.Compare(a.id, b.id) })
	c.local.m[key] = slices.Insert(ws, at, q)
	q.listed = true
}

func (c *Client) unlist(ctx context.Context, q *queued, took *Lock) {
	c.local.mu.Lock()
	if q.listed {
		key := q.keys[0]
		first := len(c.local.m[key]) > 0 && c.local.m[key][0] == q
		ws := slices.DeleteFunc(c.local.m[key], func(o *queued) bool { return o == q })
		if len(ws) == 0 {
			delete(c.local.m, key)
			delete(c.local.views, key)
		} else {
			c.local.m[key] = ws
			if first {
				c.lineUp(ws, 0, took != nil) // see awaitTurn
			}
		}
		q.listed = false
	}
	var left *Lock
	select {
	case left = <-q.grant:
	default:
	}
	c.local.mu.Unlock()
	if left != nil && left != took {
		left.abandonHanded(ctx, nil)
	}
}

// awaitTurn is the first wait of a Lock call that found waiters of its
// client queued on the resource: listed here, with no entry on the
// masters yet, it waits for a lock passed to it, for the nudge that makes
// it next in line (deliver, unlist) when it is not sure to be passed the
// lock (passWillCome), or for the entry's refresh interval, and then makes
// its first queued attempt. A waiter that a recent attempt of its client
// covers is passed the lock with no round of its own: about one
// fair_lock.lua round per batch of waiters instead of one per waiter.
func (c *Client) awaitTurn(ctx context.Context, q *queued) (*Lock, error) {
	t := time.NewTimer(c.cfg.fairTTL / 3)
	defer t.Stop()
	for {
		select {
		case l := <-q.grant:
			return l, nil
		case <-q.wake:
			if !c.passWillCome(q) {
				return nil, nil
			}
		case <-t.C:
			return nil, nil
		case <-ctx.Done():
			return nil, errors.Join(ErrNotAcquired, ctx.Err())
		}
	}
}

// passWillCome reports whether q, nudged as next in line, may wait here
// for the lock: a Lock of this client holds it, whose Unlock passes it to
// q when covered.
func (c *Client) passWillCome(q *queued) bool {
	c.local.mu.Lock()
	defer c.local.mu.Unlock()
	if q.passComing && c.coveredLocked(q) {
		q.toAttempt = false
		return true
	}
	return false
}

// coveredLocked reports whether the last view of q's lock puts q ahead of
// every waiter of another client: q arrived before that attempt began and
// no other client's waiter then queued had an earlier stamp. One that
// queues later has a later stamp (up to the skew of the clients' clocks,
// which bends the order as it does every stamp's). c.local.mu is held.
func (c *Client) coveredLocked(q *queued) bool {
	v, ok := c.local.views[q.keys[0]]
	return ok && q.at <= v.at && q.at < v.foreign
}

// lazyLocked reports whether q never began an attempt: it has no entry on
// the masters. c.local.mu is held.
func lazyLocked(q *queued) bool {
	return q.attempts == 0 && !q.attempting
}

// lineUp nudges the waiters of ws (one lock's, in queue order) after the
// line moved: ws[from] is next in line. While a Lock of ours holds
// (passing), the waiter after it, when it never queued on the masters and
// no view covers it, makes its first attempt now, during the section
// before its turn: its view, which covers it and every waiter listed
// behind it, is there when its turn comes, and no Unlock waits on it.
// c.local.mu is held.
func (c *Client) lineUp(ws []*queued, from int, passing bool) {
	if from >= len(ws) {
		return
	}
	c.nextInLine(ws[from], passing)
	if !passing || from+1 >= len(ws) {
		return
	}
	n := ws[from+1]
	if !lazyLocked(n) || c.coveredLocked(n) {
		return
	}
	for _, o := range ws {
		if o.toAttempt || (o.attempting && o.started >= n.at) {
			return // its view will cover n
		}
	}
	n.passComing, n.toAttempt = false, true
	signal(n.wake)
}

// nextInLine nudges q, now next in line, out of awaitTurn: passing tells
// it whether a Lock of this client holds the lock (its Unlock will pick
// q). A waiter that queued on the masters already is left alone while
// passing: its entry is there, and a pass reaches it where it waits; else
// it tries again at once. c.local.mu is held.
func (c *Client) nextInLine(q *queued, passing bool) {
	if lazyLocked(q) {
		if q.toAttempt {
			return // on its way to its first attempt: a second nudge would be a second attempt
		}
		q.passComing = passing
		q.toAttempt = !passing || !c.coveredLocked(q) // see passWillCome
		signal(q.wake)
	} else if !passing {
		signal(q.wake)
	}
}

// waitedOn reports whether waiters of this client are queued on key.
func (c *Client) waitedOn(key string) bool {
	c.local.mu.Lock()
	defer c.local.mu.Unlock()
	return len(c.local.m[key]) > 0
}

// attempting records that q starts an attempt (true) or finished one. It
// reports false, and records nothing, when a lock passed to q waits in its
// grant: q takes that instead of starting an attempt, which would put its
// entry on the masters after the pass decided that it had none (see
// deliver).
func (c *Client) attempting(q *queued, on bool, round *quorum.Round) bool {
	c.local.mu.Lock()
	defer c.local.mu.Unlock()
	if on && len(q.grant) > 0 {
		return false
	}
	q.attempting = on
	if on {
		q.toAttempt = false
		q.attempts++
		q.started = time.Now().UnixMicro()
	} else {
		q.pending = round != nil && round.Count(quorum.Pending) > 0
	}
	return true
}

// pick returns the first listed waiter on key that no releaser is handing
// a lock to, marked as picked, or nil; whether it is covered (the lock may
// pass to it in-process); and whether it never queued on the masters.
func (c *Client) pick(key string) (q *queued, covered, lazy bool) {
	c.local.mu.Lock()
	defer c.local.mu.Unlock()
	for _, q := range c.local.m[key] {
		if !q.granting && len(q.grant) == 0 {
			q.granting = true
			q.pickAttempts, q.pickAttempting = q.attempts, q.attempting || q.pending
			return q, c.coveredLocked(q), q.pickAttempts == 0 && !q.pickAttempting
		}
	}
	return nil, false, false
}

// unpick ends a pick of q that hands it nothing; q, never queued on the
// masters, is nudged to make its first attempt: no Lock of ours will pass
// it the lock.
func (c *Client) unpick(q *queued) {
	c.local.mu.Lock()
	q.granting = false
	if q.listed {
		c.nextInLine(q, false)
	}
	c.local.mu.Unlock()
}

// observe records what q's lost attempt saw (replies, with a majority
// answering) as its lock's view, unless a later attempt's is there.
func (c *Client) observe(q *queued, replies []holderReply) {
	answered, foreign := 0, int64(math.MaxInt64)
	for _, r := range replies {
		if r.ok {
			answered++
			foreign = min(foreign, r.foreign)
		}
	}
	if answered < c.quorum {
		return
	}
	c.local.mu.Lock()
	defer c.local.mu.Unlock()
	key := q.keys[0]
	if v, ok := c.local.views[key]; ok && v.at > q.started {
		return
	}
	if c.local.views == nil {
		c.local.views = make(map[string]view)
	}
	c.local.views[key] = view{at: q.started, foreign: foreign}
}

// passable reports whether a lease that ends at until (untilBoot on the
// clock that counts suspend) has at least three quarters of q's lease left:
// enough to pass it on to q as it is.
func (c *Client) passable(q *queued, until time.Time, untilBoot time.Duration) bool {
	lease := c.lease(q.lockTTL)
	now, boot := c.clock.now()
	left := min(until.Sub(now), untilBoot-boot)
	return left >= lease/4*3
}

// staleBatch is how many entries a chain of passes leaves queued before
// they are removed in the background.
const staleBatch = 16

func strs(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// passOn is Unlock when q, the next waiter of this client, is covered (no
// waiter of another client is ahead of it, see coveredLocked) and the
// lease has most of q's TTL left: the lock passes to q in-process, with no
// round. q's Lock has l's token, keys and lease (its Until is l's); it
// mints its own fence. The masters
// see nothing: their keys hold the same token until the same expiry, so
// mutual exclusion is l's, and l has ended before q's Lock exists. Waiters
// of other clients keep their place: q was ahead of them by its stamp.
func (l *Lock) passOn(ctx context.Context, q *queued, until time.Time, untilBoot time.Duration) error {
	c := l.c
	next := &Lock{c: c, resource: l.resource, key: l.key, keys: l.keys, token: l.token, args: l.args,
		round: l.round, queued: l.queued, passed: true, until: until, untilBoot: untilBoot}
	// The entries of the waiters of this chain of passes stay queued (q's
	// is added by deliver, when q has one): the release that ends the
	// chain removes them, or a batch in the background once there are
	// enough. Not q's at once: an attempt of q's may still be putting it
	// there.
	stale := l.stale
	if len(stale) >= staleBatch {
		c.leave(ctx, q.keys, strs(stale), nil)
		stale = nil
	}
	next.stale = stale
	c.passed.Add(1)
	if attempted := c.cfg.hooks.Attempted; attempted != nil {
		now, _ := c.clock.now()
		attempted(0, until.Sub(now), nil)
	}
	c.deliver(ctx, q, next)
	return nil
}

// raced reports whether an attempt of q ran during the handoff it took:
// its entry may then be back on masters that removed it.
func (c *Client) raced(q *queued) bool {
	c.local.mu.Lock()
	defer c.local.mu.Unlock()
	return q.pickAttempting || q.attempts != q.pickAttempts
}

// deliver ends a handoff to q: l, when not nil, is the lock it took; the
// waiter listed after q is then next in line, and is nudged to put its
// entry on the masters (see awaitTurn).
func (c *Client) deliver(ctx context.Context, q *queued, l *Lock) {
	c.local.mu.Lock()
	q.granting = false
	if l != nil && q.listed {
		if l.passed && !lazyLocked(q) {
			// q's entry is on the masters, put there by an attempt that
			// may have begun after the pick (a covered waiter that never
			// queued there has none, and starts no attempt from now on:
			// see attempting).
			l.stale = append(l.stale[:len(l.stale):len(l.stale)], q.id)
		}
		q.grant <- l // cap 1, and one handoff at a time
		l = nil
		ws := c.local.m[q.keys[0]]
		if i := slices.Index(ws, q); i >= 0 {
			c.lineUp(ws, i+1, true)
		}
	}
	c.local.mu.Unlock()
	if l != nil {
		l.abandonHanded(ctx, nil)
	}
}

// abandonHanded frees the keys of a handed lock nobody will hold, in the
// background, and then wakes wake when it is not nil: its waiter tries
// again once the masters that answered have let the keys go.
func (l *Lock) abandonHanded(ctx context.Context, wake chan struct{}) {
	l.mu.Lock()
	l.ended, l.cause = true, errUnlocked
	l.mu.Unlock()
	go func() {
		l.releaseAll(context.WithoutCancel(ctx), l.round, nil)
		if wake != nil {
			signal(wake)
		}
	}()
}

// handOff is Unlock when q, a waiter of this client, may take the lock:
// one round of release.lua on the masters where l's acquiring call
// returned (in its round or after it), which releases l and sets q's new
// key where q is the head of the queue and the key held l's token or was
// free for the head. The masters where l's call failed or is still running
// get the plain release once it has returned, in the background. Unlock's
// outcome counts the masters where l's token was released, handed or not.
func (l *Lock) handOff(ctx context.Context, q *queued) error {
	c := l.c
	detached := context.WithoutCancel(ctx)
	old := l.round
	next := newLock(c, l.resource, newToken())
	ttl := q.lockTTL
	c.watcher.Issued(ttl)
	who := make([]atomic.Int32, len(c.masters))
	// release.lua's reply + 1 per master, from the handoff's call or the
	// plain release; 0: none yet, -1: failed.
	replies := make([]atomic.Int64, len(c.masters))
	answered := make(chan struct{}, len(c.masters)) // one per call that returned
	// The masters where l's acquiring call returned are this round's,
	// decided before it starts. A call of l's that failed or is still
	// running may yet set l's key: that master gets the plain release,
	// after the call (below).
	for i := range c.masters {
		if _, err, ok := old.Returned(i); ok && err == nil {
			who[i].Store(byHandoff)
		}
	}
	start, boot := c.clock.now()
	round := c.group.Do(detached, func(ctx context.Context, i int) (bool, error) {
		if who[i].Load() != byHandoff {
			return false, errNotHanded
		}
		n, err := call(c, ctx, i, func(ctx context.Context, m driver.Conn) (int64, error) {
			return evalInt(ctx, m, releaseScript, l.keys, append([]any{l.token, q.id, next.token, ttl.Milliseconds()}, strs(l.stale)...)...)
		})
		if err != nil {
			replies[i].Store(-1)
		} else {
			replies[i].Store(n + 1)
		}
		answered <- struct{}{}
		return c.vote(i, n == handedOver || n == handedFree, err)
	})
	next.round = round
	lease := c.lease(ttl)
	deadline := start.Add(lease)
	next.untilBoot = boot + lease

	args := l.releaseArgs()
	old.UndoUntil(detached, c.cfg.nodeTimeout, func(ctx context.Context, i int) {
		if !who[i].CompareAndSwap(undecided, byRelease) {
			return
		}
		if _, err := old.Result(i); err != nil && c.neverSent(i, err) {
			replies[i].Store(0 + 1) // nothing to release
			answered <- struct{}{}
			return
		}
		var r release
		l.releaseOne(ctx, i, &r, args)
		switch r.state.Load() {
		case releasedHeld:
			replies[i].Store(1 + 1)
		case releasedNotOurs:
			replies[i].Store(0 + 1)
		default:
			replies[i].Store(-1)
		}
		answered <- struct{}{}
	}, func() bool { return true })

	switch got := round.Count(quorum.Agreed); {
	case got >= c.quorum && !next.over(deadline, next.untilBoot):
		next.until = deadline
		c.handed.Add(1)
		if attempted := c.cfg.hooks.Attempted; attempted != nil {
			now, _ := c.clock.now()
			attempted(now.Sub(start), deadline.Sub(now), nil)
		}
		c.deliver(ctx, q, next)
	default:
		// Too few counted to hold. Masters that took q's token may be among
		// those not counted (quarantined, a reply lost after the script
		// ran, a call that outlives the round): their keys would stay for
		// q's whole TTL with a token nobody holds. Free them, then q tries
		// at once.
		c.deliver(ctx, q, nil)
		next.abandonHanded(ctx, q.wake)
	}

	return l.handedOutcome(round, who, replies, answered)
}

// handedOutcome is Unlock's outcome of a handoff round: it waits, at most
// until the round's calls end, until the releases that held our token make
// a majority or can no longer.
func (l *Lock) handedOutcome(round *quorum.Round, who []atomic.Int32, replies []atomic.Int64, answered <-chan struct{}) error {
	c := l.c
	var timer *time.Timer
	for {
		held, failed, open := 0, 0, 0
		for i := range c.masters {
			switch n := replies[i].Load(); {
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
			case <-answered:
				continue
			case <-timer.C:
			}
			failed += open
		}
		var errs []error
		for i := range c.masters {
			if who[i].Load() != byHandoff {
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
