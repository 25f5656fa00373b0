package redlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/quorum"
	"quorumlock.dev/redlock/internal/fair"
	"quorumlock.dev/redlock/internal/push"
)

// Fair handoff ([WithFairness]): a Lock call that lost its first attempt
// becomes a queued waiter. It takes an arrival stamp (the client's wall
// clock in µs and a random tiebreak, one value for every master) and from
// then on attempts with scripts/fair_lock.lua, which enqueues it on each
// master and sets the key only for the head of the queue. A release hands
// the key to the queue (scripts/release.lua) instead of deleting it, so a
// releaser that locks again at once queues behind those already waiting.
// The stamp only orders waiters: mutual exclusion still comes from the key
// set on a majority. The client's own waiters stand in its fair.Line;
// docs/design.md ("Fair handoff") says why it is built this way.

// reserved is the lock key's value while a release hands it to the
// queue's head; no token equals it.
const reserved = "q"

// queued is one Lock call that waits in the masters' queues.
type queued struct {
	*fair.Waiter[*Lock]
	wake   chan struct{} // the push waiter's: try again at once
	keys   []string      // the lock key
	ttlMS  int64         // the entry's TTL
	pushed bool          // a release on a majority reaches us
	last   *fairReplies
	prefix string // of every attempt's token: prefix.<n>; Waiter.Entry is "<id> <prefix>"
	tries  uint64 // queued attempts made
	latest queuedAttempt
	handed []string // scratch for push.Waiter.Handed
}

// queuedAttempt is the latest queued attempt of a waiter that lost: the
// masters that refused it may hand the key to its token (its entry's
// claim) later.
type queuedAttempt struct {
	token string
	ttl   time.Duration
	start time.Time     // when its round began
	boot  time.Duration // the same on the clock that counts suspend
	round *quorum.Round
}

// token is the token of q's next attempt.
func (q *queued) token() string {
	q.tries++
	return q.prefix + "." + strconv.FormatUint(q.tries, 16)
}

// fairReplies is what fair_lock.lua said on each master in one attempt.
// Calls that outlive their round write after it was read: they are dropped.
type fairReplies struct {
	mu      sync.Mutex
	r       []push.Holder
	foreign []int64 // the stamp of the first waiter of another client queued (fair.NoForeign: none)
	over    bool
	claim   string // "1": the attempt writes its entry's claim (fair.Line.Claims); "": it removes one
}

func (f *fairReplies) set(i int, r push.Holder, foreign int64) {
	f.mu.Lock()
	if !f.over {
		f.r[i], f.foreign[i] = r, foreign
	}
	f.mu.Unlock()
}

// read ends the attempt's replies: later calls are dropped.
func (f *fairReplies) read() ([]push.Holder, []int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.over = true
	return f.r, f.foreign
}

// enqueue makes the queued state of a Lock call on key for ttl, woken by
// w. The queue's names are scripts/queue.lua's, derived on the masters.
func (c *Client) enqueue(key string, ttl time.Duration, w *push.Waiter, rnd *rand.Rand) *queued {
	now := c.stamp()
	id := fmt.Sprintf("%014x%s%08x", now, c.tag, randUint32(rnd))
	w.SetID(id, len(c.masters), c.quorum, push.HandoffChannel(key, c.tag))
	wake := w.Wake()
	prefix := newToken(rnd)
	q := &queued{
		Waiter: fair.NewWaiter[*Lock](id, now, key, ttl.Truncate(time.Millisecond), func() { push.Signal(wake) }),
		wake:   wake,
		keys:   []string{key},
		ttlMS:  c.cfg.fairTTL.Milliseconds(),
		prefix: prefix,
		handed: make([]string, len(c.masters)),
	}
	q.Entry = id + " " + prefix
	return q
}

// stamp is an arrival stamp: µs since the Unix epoch, and above every
// stamp this client gave before, so that its waiters line up in the order
// they arrived even when the clock gives two of them the same µs (a tie
// would go to the random part of the ids).
func (c *Client) stamp() int64 {
	for {
		last := c.stamped.Load()
		now := max(c.line.Wall(), last+1)
		if c.stamped.CompareAndSwap(last, now) {
			return now
		}
	}
}

// queueBehindOurs is the start of a fair Lock call that finds waiters of
// its client queued on the resource: a plain SET NX would lose. It queues
// behind them, here first: its entry goes to the masters when it is next
// in line (a release nudges it), or at the refresh.
//
// A fair Lock call that finds none, on a resource this client waited on
// within the last second (its channel still subscribed), queues at once
// too: its first attempt is a queued one, which takes a free key as a
// plain SET NX would, and on a resource others take turns on it saves the
// plain round that would only lose (with clients that each run one
// goroutine, one round in every two a section cost).
func (lw *lockWait) queueBehindOurs(ctx context.Context) error {
	c := lw.c
	key := "lock:" + lw.resource
	if c.cfg.fairTTL <= 0 || lw.multi != nil {
		return nil
	}
	ours := c.line.WaitedOn(key)
	if !ours && !c.push.Subscribed(key) {
		return nil
	}
	lw.w = c.joinWait(key)
	lw.q = c.enqueue(key, lw.ttl, lw.w, lw.rnd)
	if !ours {
		return nil // the first attempt is a queued one
	}
	if c.cfg.hooks.Waiting != nil {
		lw.waiting = true // before it can be seen listed
		c.cfg.hooks.Waiting(1)
	}
	c.line.List(lw.q.Waiter)
	lw.grant = lw.q.Grant
	h, ok, err := c.line.AwaitTurn(ctx, lw.q.Waiter, lw.q.wake, c.cfg.fairTTL/3)
	if err != nil {
		return errors.Join(ErrNotAcquired, err)
	}
	if ok {
		lw.handed = h
	}
	return nil
}

// fairCall is one queued attempt on master i, m: true when the key is ours.
func (c *Client) fairCall(ctx context.Context, m driver.Conn, i int, q *queued, rep *fairReplies, token string, ttlMS int64) (bool, error) {
	vals, err := evalSlice(ctx, m, fairLockScript, q.keys, token, ttlMS, q.ID, q.At, q.ttlMS, c.tag, q.prefix, rep.claim)
	if err != nil {
		return false, err
	}
	if len(vals) == 1 && vals[0] == int64(1) {
		return true, nil
	}
	if len(vals) != 4 {
		return false, fmt.Errorf("redlock: fair lock script replied %v", vals)
	}
	r := holderOf(vals[1], vals[2])
	foreign, err := foreignStamp(vals[3])
	if err != nil {
		return false, err
	}
	rep.set(i, r, foreign)
	return false, nil
}

// foreignStamp reads fair_lock.lua's fourth reply: the arrival stamp of the
// first waiter of another client queued, in hex µs, or "" for none
// (fair.NoForeign).
func foreignStamp(v any) (int64, error) {
	s, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("redlock: fair lock script replied %v for the first foreign waiter", v)
	}
	if s == "" {
		return fair.NoForeign, nil
	}
	n, err := strconv.ParseInt(s, 16, 64)
	if err != nil {
		// An entry that is none of ours (written by hand, another
		// library): no waiter of ours is known to be ahead of it.
		return 0, nil
	}
	return n, nil
}

// readyQueued prepares w for a queued attempt: any release from now on
// wakes it; it reports whether a release on a majority reaches it.
func (c *Client) readyQueued(ctx context.Context, w *push.Waiter) bool {
	w.Drain()
	w.SetHolder("")
	w.Expect(0)
	w.Expect(c.quorum) // until planQueued knows better
	return w.Listening(ctx, c.quorum, c.cfg.nodeTimeout)
}

// planQueued is plan for a queued waiter, from the replies of its attempt:
// it sleeps until the key may be free for it, a release that names it the
// head wakes it, and it wakes in time to refresh its entry.
func (c *Client) planQueued(w *push.Waiter, round *quorum.Round, q *queued, poll time.Duration, rnd *rand.Rand) time.Duration {
	replies, foreigns := q.last.read()
	answered, foreign := 0, int64(fair.NoForeign)
	for i, r := range replies {
		if r.OK {
			answered++
			foreign = min(foreign, foreigns[i])
		}
	}
	if answered >= c.quorum {
		c.line.Observe(q.Waiter, foreign)
	}
	free, known, holder := push.WakeAfter(round, replies, c.quorum)
	w.SetHolder(holder)
	// The masters held by a token must publish its release; a majority is
	// free once all but n-quorum of them did.
	held := 0
	for _, r := range replies {
		if r.OK && r.Token != "" && r.Token != reserved {
			held++
		}
	}
	w.Expect(max(held-(len(c.masters)-c.quorum), 1))
	refresh := c.cfg.fairTTL / 3
	if !known {
		return min(poll, refresh)
	}
	free += randN(rnd, wakeJitter)
	if !q.pushed {
		free = min(free, poll)
	}
	return min(free, refresh)
}

// dequeue removes q's entry in the background, each master bounded by the
// node timeout, on every master but those whose call in won (the round of
// the lock it took, whose script removed it; nil when q gave up) returned
// agreed. A key that a release handed to one of q's tokens there is
// released too, unless it holds token, the lock's: that one goes with
// the lock. An entry that a late call adds again expires.
func (c *Client) dequeue(ctx context.Context, q *queued, won *quorum.Round, token string) {
	if won != nil && won.Count(quorum.Agreed) == len(c.masters) {
		return
	}
	entry := q.Entry
	if strings.HasPrefix(token, q.prefix) {
		entry += " " + token
	}
	c.leave(ctx, q.keys, []any{entry}, q.TTL, func(i int) bool {
		if won == nil {
			return false
		}
		// Calls that won after their round ended removed the entry too.
		agreed, _, ok := won.Returned(i)
		return ok && agreed
	})
}

// leave removes the queue entries of keys (the lock key; entries as
// fair.Waiter.Entry names them, scripts/fair_leave.lua) in the background,
// on every master but those skip names, each bounded by the node timeout,
// and releases a key handed to one of them (set for at most ttl). A call
// that gets no reply is tried again in the background (cleanup.go); an
// entry that a late call adds again expires.
func (c *Client) leave(ctx context.Context, keys []string, entries []any, ttl time.Duration, skip func(int) bool) {
	ctx = context.WithoutCancel(ctx)
	go quorum.Group{Nodes: len(c.masters), Timeout: c.cfg.nodeTimeout}.Do(ctx, func(ctx context.Context, i int) (bool, error) {
		if skip != nil && skip(i) {
			return true, nil
		}
		_, err := call(c, ctx, i, func(ctx context.Context, m driver.Conn) (any, error) {
			return m.Eval(ctx, fairLeaveScript, keys, entries...)
		})
		if !driver.Replied(err) {
			// Left on the master, the entry may become the queue's head
			// there while others have other heads: nobody wins the
			// reserved key until it expires. Tried again (cleanup.go).
			c.cfg.logger.Debug("redlock: leaving the wait queue got no reply; retrying in the background", "master", c.addrs[i], "err", err)
			c.retryScript(i, fairLeaveScript, keys, entries, max(ttl, c.cfg.fairTTL), keys[0])
		}
		return err == nil, err
	})
}

// takePushed is the start of a queued waiter's try: when releases handed
// the key to the token of its latest attempt on a majority of masters that
// refused that attempt, the lock is its with no round of its own (ok
// true; err when the fence could not be minted). A master that refused the
// attempt had queued its entry, whose claim is that token, before the
// release set the key to it, so the keys were set after the attempt's
// round began: a lease counted from that start is backed, as an attempt's
// is (docs/design.md, "Handoff between clients"). Too little of the lease
// left, too few masters: the next attempt takes the handed keys over
// (fair_lock.lua).
func (lw *lockWait) takePushed(ctx context.Context) (l *Lock, err error, ok bool) {
	c, q := lw.c, lw.q
	a := q.latest
	if a.round == nil {
		return nil, nil, false
	}
	lw.w.Handed(q.handed)
	var agreed []bool // the masters that count
	n := 0
	for i, t := range q.handed {
		if t == a.token && refused(a.round, i) && !c.watcher.Quarantined(i) {
			if agreed == nil {
				agreed = make([]bool, len(c.masters))
			}
			agreed[i] = true
			n++
		}
	}
	if n < c.quorum {
		return nil, nil, false
	}
	lease := c.lease(a.ttl)
	deadline, untilBoot := a.start.Add(lease), a.boot+lease
	now, boot := c.clock.now()
	if left := min(deadline.Sub(now), untilBoot-boot); left < lease/4*3 {
		return nil, nil, false
	}
	q.latest = queuedAttempt{}
	l = newLock(c, lw.resource, a.token)
	l.round, l.untilBoot, l.ttl = quorum.Settled(agreed), untilBoot, a.ttl
	if c.cfg.minter != nil {
		if err := c.mint(ctx, l, deadline); err != nil {
			c.abandon(ctx, l.round, l)
			return nil, err, true
		}
	}
	l.until = deadline
	c.taken.Add(1)
	if attempted := c.cfg.hooks.Attempted; attempted != nil {
		now, _ := c.clock.now()
		attempted(now.Sub(a.start), deadline.Sub(now), nil)
	}
	return l, nil, true
}

// refused reports whether master i's call in round returned a refusal.
func refused(round *quorum.Round, i int) bool {
	agreed, err, ok := round.Returned(i)
	return ok && !agreed && err == nil
}

// joinWait registers a waiter on key's channel and, for a fair client, on
// its handoff channel, which enqueue names: both go in one SUBSCRIBE.
func (c *Client) joinWait(key string) *push.Waiter {
	if c.cfg.fairTTL > 0 {
		return c.push.JoinQueued(key, push.HandoffChannel(key, c.tag))
	}
	return c.push.Join(key)
}
