package redlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/fence"
	"quorumlock.dev/quorum"
	"quorumlock.dev/redlock/internal/fair"
	"quorumlock.dev/redlock/internal/push"
	"quorumlock.dev/redlock/internal/wait"
)

// The fair wait policy ([WithFairness]): a Lock call that lost its first
// attempt becomes a queued waiter. It takes an arrival stamp (the client's
// wall clock in µs and a random tiebreak, one value for every master) and
// from then on attempts with scripts/fair_lock.lua, which enqueues it on
// each master and sets the key only for the head of the queue. A release
// hands the key to the queue (queue.lua's release_key) instead of deleting
// it, so a releaser that locks again at once queues behind those already
// waiting. The stamp only orders waiters: mutual exclusion still comes
// from the key set on a majority. The client's own waiters stand in its
// fair.Line, and Unlock hands the lock to them (handoff.go);
// docs/design.md ("Fair handoff") says why it is built this way.

// reserved is the lock key's value while a release hands it to the
// queue's head; no token equals it.
const reserved = "q"

// fairPolicy is a Client with [WithFairness].
type fairPolicy struct {
	c       *Client
	line    fair.Line[*Lock] // fair waiters that a release may hand the lock to
	handed  atomic.Uint64    // locks handed to a waiter of this client by its releases' rounds
	taken   atomic.Uint64    // locks a waiter of this client took from handoffs pushed by the masters (takePushed)
	passed  atomic.Uint64    // ... and without a round (see passOn)
	tag     string           // 8 hex digits in the ids of this client's queued waiters
	stamped atomic.Int64     // the last arrival stamp given (see stamp)
	entry   time.Duration    // the TTL of a waiter's queue entry (WithFairness)
}

func newFairPolicy(c *Client, tag string, wall func() int64) *fairPolicy {
	p := &fairPolicy{c: c, tag: tag, entry: c.cfg.fairTTL}
	p.line.Wall = wall
	return p
}

func (p *fairPolicy) Join(ctx context.Context, resource string, ttl time.Duration) (wait.Waiter[*Lock], error) {
	f := &fairWait{Base: p.c.newBase(resource, ttl), c: p.c, p: p}
	return f, f.queueBehindOurs(ctx)
}

// Unlock passes l on to the next waiter of this client on its key, when
// there is one: in-process when it is covered and most of the lease is
// left (passOn), else in a handoff round (handOff). A lock that had ended
// is released as usual, and the waiter then tries in a round of its own.
func (p *fairPolicy) Unlock(ctx context.Context, l *Lock, until time.Time, untilBoot time.Duration, lost error) (bool, func(), error) {
	if len(l.keys) != 1 {
		return false, nil, nil
	}
	q, covered, lazy := p.line.Pick(l.key)
	switch {
	case q == nil:
		return false, nil, nil
	case lost != nil:
		// Its keys may be gone and another client may hold the lock:
		// nothing of it is passed on. A plain release, then q tries in a
		// round of its own.
		return false, func() { p.line.Unpick(q) }, nil
	case covered && p.passable(q, until, untilBoot): // never a waiter that Claimed (fair.Line.Pick)
		return true, nil, p.passOn(ctx, l, q, until, untilBoot)
	case lazy:
		// No entry of q's for the masters to hand the key to: a plain
		// release, then q's first attempt.
		return false, func() { p.line.Unpick(q) }, nil
	}
	return true, nil, p.handOff(ctx, l, q)
}

// fairWait is one Lock call of the fair policy. Its first attempt is a
// plain one (SET NX), unless waiters of its client are queued already;
// the first loss to a holder queues it.
type fairWait struct {
	wait.Base[*Lock]
	c       *Client
	p       *fairPolicy
	w       *push.Waiter // nil until queued: an uncontended Lock pays nothing
	q       *queued      // nil until then too
	grant   <-chan *Lock // where a release of this client hands us the lock
	handed  *Lock        // one it handed us, not taken yet
	took    *Lock        // the lock this call returns
	won     *quorum.Round
	attempt *fairReplies // what the masters said in the latest queued attempt (nil: none made)
}

// queued is one Lock call that waits in the masters' queues.
type queued struct {
	*fair.Waiter[*Lock]
	wake   chan struct{} // the push waiter's: try again at once
	keys   []string      // the lock key
	ttlMS  int64         // the entry's TTL
	pushed bool          // a release on a majority reaches us
	prefix string        // of every attempt's token: prefix.<n>; Waiter.Entry is "<id> <prefix>"
	tries  uint64        // queued attempts made
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

// Try takes a lock handed to us, or else makes an attempt (see waiter).
func (f *fairWait) Try(ctx context.Context) (*Lock, *quorum.Round, error, bool) {
	p, q := f.p, f.q
	if f.handed == nil && f.grant != nil {
		select {
		case f.handed = <-f.grant:
		default:
		}
	}
	if h := f.handed; h != nil {
		f.handed = nil
		l, err := f.take(ctx, h)
		if err == nil {
			f.took, f.won = l, l.round
			if passedOn(l) || p.line.Raced(q.Waiter) {
				// Our entry is still queued (a lock passed on removes
				// none), or may be back where the handoff removed it.
				f.won = nil
			}
			return l, nil, nil, true
		}
		if errors.Is(err, fence.ErrCounterRegressed) {
			return nil, nil, err, true
		}
	}
	if q == nil {
		// Not queued yet: a plain attempt, which takes a free key.
		l, round, err := f.c.attemptLock(ctx, newLock(f.c, f.Resource, newToken(f.Rnd)), f.TTL, nil)
		if err == nil {
			f.took, f.won = l, l.round
		}
		return l, round, err, true
	}
	if l, err, ok := f.takePushed(ctx); ok {
		if err == nil {
			f.took, f.won = l, l.round
		}
		return l, nil, err, true
	}
	q.pushed = p.readyQueued(ctx, f.w)
	if !p.line.Attempting(q.Waiter, true, false) {
		f.handed = <-q.Grant // passed to us since the check above
		return nil, nil, nil, false
	}
	l := newLock(f.c, f.Resource, q.token())
	f.w.SetOwn(l.token)
	a := &queuedAsk{f: f}
	l, round, err := f.c.attemptLock(ctx, l, f.TTL, a)
	f.attempt = a.rep
	p.line.Attempting(q.Waiter, false, round != nil && round.Count(quorum.Pending) > 0)
	// Our entry is on the masters now: a release may hand us the lock.
	p.line.List(q.Waiter)
	f.grant = q.Grant
	if err == nil {
		f.took, f.won = l, l.round
	}
	return l, round, err, true
}

// queuedAsk is one queued attempt of f (a wait.Asker). Its replies are its
// own: calls that outlive the round write there, never into the next
// attempt's.
type queuedAsk struct {
	f   *fairWait
	rep *fairReplies
}

// Prepare readies the attempt on l: whether it writes its entry's claim,
// decided under the line's mutex with the picks of this client's releases
// (fair.Line.Claims).
func (a *queuedAsk) Prepare(l *Lock, _ time.Duration) {
	n := len(a.f.c.masters)
	a.rep = &fairReplies{r: make([]push.Holder, n), foreign: make([]int64, n)}
	if a.f.p.line.Claims(a.f.q.Waiter) { // marks q Claimed
		a.rep.claim = "1"
	}
	l.refusedClean = true
}

// Ask is master i's call of the attempt: true when the key is ours.
func (a *queuedAsk) Ask(ctx context.Context, i int, l *Lock, ttl time.Duration) (bool, error) {
	f, q, rep := a.f, a.f.q, a.rep
	return call(f.c, ctx, i, func(ctx context.Context, m driver.Conn) (bool, error) {
		vals, err := evalSlice(ctx, m, fairLockScript, q.keys, l.token, ttl.Milliseconds(), q.ID, q.At, q.ttlMS, f.p.tag, q.prefix, rep.claim)
		if err != nil {
			return false, err
		}
		if len(vals) == 1 && vals[0] == int64(1) {
			return true, nil
		}
		if len(vals) != 4 {
			return false, fmt.Errorf("redlock: fair lock script replied %v", vals)
		}
		foreign, err := foreignStamp(vals[3])
		if err != nil {
			return false, err
		}
		rep.set(i, push.HolderOf(vals[1], vals[2]), foreign)
		return false, nil
	})
}

// Asked keeps the attempt that round decided: the masters that refused it
// may hand the key to its token later (takePushed). Lost, it is undone
// with its entry put back where it took the key (fair_undo.lua).
func (a *queuedAsk) Asked(l *Lock, round *quorum.Round, start time.Time, boot time.Duration) {
	q := a.f.q
	q.latest = queuedAttempt{token: l.token, ttl: l.ttl, start: start, boot: boot, round: round}
	l.undo = &scriptCall{fairUndoScript, []any{l.token, q.ID, q.At, q.ttlMS}}
}

// Unasked: a queued attempt asks every master.
func (a *queuedAsk) Unasked(*quorum.Round, int) bool { return false }

// Sleep waits after a lost attempt (see wait.Waiter): the first loss to a
// holder queues the call and returns at once, for its first queued
// attempt; later ones sleep as planQueued says, or until a lock is handed
// to us.
func (f *fairWait) Sleep(ctx context.Context, round *quorum.Round, err error, held bool) error {
	wait := f.Poll()
	var wake <-chan struct{}
	if round != nil && held {
		key := "lock:" + f.Resource
		if f.w == nil {
			f.w = f.p.joinWait(key)
			f.q = f.p.enqueue(key, f.TTL, f.w, f.Rnd)
			return nil // the first queued attempt enqueues us, now
		}
		wait = f.p.planQueued(f.w, round, f.q, f.attempt, wait, f.Rnd)
		wake = f.w.Wake()
	}
	h, err := f.Rest(ctx, wait, wake, f.grant, nil, false, err)
	if h != nil {
		f.handed = h
	}
	return err
}

// End undoes what waiting made: a lock handed to us and not taken is
// freed, the subscriptions left, and for a queued call its place in this
// client's line and on the masters given up.
func (f *fairWait) End(ctx context.Context) {
	p, q := f.p, f.q
	if f.handed != nil {
		f.handed.abandonHanded(ctx, nil)
		f.handed = nil
	}
	f.Stop()
	if f.w != nil {
		f.w.Leave()
	}
	if q == nil {
		return
	}
	if left := p.line.Unlist(q.Waiter, f.took); left != nil {
		left.abandonHanded(ctx, nil)
	}
	if f.took == nil || !passedOn(f.took) {
		token := ""
		if f.took != nil {
			token = f.took.token
		}
		p.dequeue(ctx, q, f.won, token) // a lock passed on carries our entry in its stale list
	}
}

// take makes a lock handed over by a release (see handoff.go) ours: its
// fence is minted here, within its validity. A lock it cannot take (no
// fence) is freed, and the call goes on waiting: when the lock was passed
// in-process, our entry is among those its release removes as left behind
// by a waiter that took it (see passOn); it is taken off that list, or the
// release would remove the entry of a waiter still queued, and delete the
// key its next attempt sets (found by the simulator: a lock held on two
// masters of five; TestFailedTakeKeepsEntryVirtual).
func (f *fairWait) take(ctx context.Context, l *Lock) (*Lock, error) {
	c := f.c
	if c.cfg.minter != nil {
		if err := c.mint(ctx, l, l.until); err != nil {
			if ch := chainOf(l); ch != nil && f.q != nil {
				setStale(l, slices.DeleteFunc(slices.Clone(ch.stale), func(e string) bool { return e == f.q.Entry }))
			}
			l.abandonHanded(ctx, nil)
			return nil, err
		}
	}
	return l, nil
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
func (f *fairWait) queueBehindOurs(ctx context.Context) error {
	p, c := f.p, f.c
	key := "lock:" + f.Resource
	ours := p.line.WaitedOn(key)
	if !ours && !c.push.Subscribed(key) {
		return nil
	}
	f.w = p.joinWait(key)
	f.q = p.enqueue(key, f.TTL, f.w, f.Rnd)
	if !ours {
		return nil // the first attempt is a queued one
	}
	f.Listed() // before it can be seen listed
	p.line.List(f.q.Waiter)
	f.grant = f.q.Grant
	h, ok, err := p.line.AwaitTurn(ctx, f.q.Waiter, f.q.wake, p.entry/3)
	if err != nil {
		return errors.Join(ErrNotAcquired, err)
	}
	if ok {
		f.handed = h
	}
	return nil
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
func (f *fairWait) takePushed(ctx context.Context) (l *Lock, err error, ok bool) {
	c, q := f.c, f.q
	a := q.latest
	if a.round == nil {
		return nil, nil, false
	}
	f.w.Handed(q.handed)
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
	l = newLock(c, f.Resource, a.token)
	l.round, l.untilBoot, l.ttl = quorum.Settled(agreed), untilBoot, a.ttl
	if c.cfg.minter != nil {
		if err := c.mint(ctx, l, deadline); err != nil {
			c.abandon(ctx, l.round, l)
			return nil, err, true
		}
	}
	l.until = deadline
	f.p.taken.Add(1)
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

// enqueue makes the queued state of a Lock call on key for ttl, woken by
// w. The queue's names are scripts/queue.lua's, derived on the masters.
func (p *fairPolicy) enqueue(key string, ttl time.Duration, w *push.Waiter, rnd *rand.Rand) *queued {
	c := p.c
	now := p.stamp()
	id := fmt.Sprintf("%014x%s%08x", now, p.tag, randUint32(rnd))
	w.SetID(id, len(c.masters), c.quorum, push.HandoffChannel(key, p.tag))
	wake := w.Wake()
	prefix := newToken(rnd)
	q := &queued{
		Waiter: fair.NewWaiter[*Lock](id, now, key, ttl.Truncate(time.Millisecond), func() { push.Signal(wake) }),
		wake:   wake,
		keys:   []string{key},
		ttlMS:  p.entry.Milliseconds(),
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
func (p *fairPolicy) stamp() int64 {
	for {
		last := p.stamped.Load()
		now := max(p.line.Wall(), last+1)
		if p.stamped.CompareAndSwap(last, now) {
			return now
		}
	}
}

// joinWait registers a waiter on key's channel and on its handoff channel,
// which enqueue names: both go in one SUBSCRIBE.
func (p *fairPolicy) joinWait(key string) *push.Waiter {
	return p.c.push.JoinQueued(key, push.HandoffChannel(key, p.tag))
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
func (p *fairPolicy) readyQueued(ctx context.Context, w *push.Waiter) bool {
	c := p.c
	w.Drain()
	w.SetHolder("")
	w.Expect(0)
	w.Expect(c.quorum) // until planQueued knows better
	return w.Listening(ctx, c.quorum, c.cfg.nodeTimeout)
}

// planQueued is plan for a queued waiter, from the replies rep of its
// attempt: it sleeps until the key may be free for it, a release that
// names it the head wakes it, and it wakes in time to refresh its entry.
func (p *fairPolicy) planQueued(w *push.Waiter, round *quorum.Round, q *queued, rep *fairReplies, poll time.Duration, rnd *rand.Rand) time.Duration {
	c := p.c
	replies, foreigns := rep.read()
	answered, foreign := 0, int64(fair.NoForeign)
	for i, r := range replies {
		if r.OK {
			answered++
			foreign = min(foreign, foreigns[i])
		}
	}
	if answered >= c.quorum {
		p.line.Observe(q.Waiter, foreign)
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
	refresh := p.entry / 3
	if !known {
		return min(poll, refresh)
	}
	free += wait.RandN(rnd, wait.WakeJitter)
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
func (p *fairPolicy) dequeue(ctx context.Context, q *queued, won *quorum.Round, token string) {
	if won != nil && won.Count(quorum.Agreed) == len(p.c.masters) {
		return
	}
	entry := q.Entry
	if strings.HasPrefix(token, q.prefix) {
		entry += " " + token
	}
	p.leave(ctx, q.keys, []any{entry}, q.TTL, func(i int) bool {
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
func (p *fairPolicy) leave(ctx context.Context, keys []string, entries []any, ttl time.Duration, skip func(int) bool) {
	c := p.c
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
			c.retryScript(i, fairLeaveScript, keys, entries, max(ttl, p.entry), keys[0])
		}
		return err == nil, err
	})
}

// chain is what the fair policy keeps with a lock passed on in-process
// (Lock.kept): the queue entries of this client's waiters that passOn
// left behind, which the lock's release removes (handoff.lua).
type chain struct {
	stale []string
}

// chainOf is l's chain, nil for a lock that was not passed on in-process.
func chainOf(l *Lock) *chain {
	ch, _ := l.kept.(*chain)
	return ch
}

// passedOn reports a lock passed on in-process (see passOn): its token,
// keys, round and lease are its predecessor's.
func passedOn(l *Lock) bool { return chainOf(l) != nil }

// setStale makes l a lock passed on in-process whose release removes the
// entries stale.
func setStale(l *Lock, stale []string) {
	l.kept = &chain{stale: stale}
	l.releaseBy = nil
	if len(stale) > 0 {
		l.releaseBy = &scriptCall{handoffScript, append([]any{l.token, "", "", 0}, strs(stale)...)}
	}
}

func strs(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
