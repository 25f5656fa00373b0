package fair

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
	"quorumlock.dev/redlock/internal/push"
	"quorumlock.dev/redlock/internal/wait"
)

// The fair wait policy: a Lock call that lost its first
// attempt becomes a queued waiter. It takes an arrival stamp (the client's
// wall clock in µs and a random tiebreak, one value for every master) and
// from then on attempts with scripts/fair_lock.lua, which enqueues it on
// each master and sets the key only for the head of the queue. A release
// hands the key to the queue (queue.lua's release_key) instead of deleting
// it, so a releaser that locks again at once queues behind those already
// waiting. The stamp only orders waiters: mutual exclusion still comes
// from the key set on a majority. The client's own waiters stand in its
// Line, and Unlock hands the lock to them (handoff.go).

// reserved is the lock key's value while a release hands it to the
// queue's head; no token equals it.
const reserved = "q"

// Policy is a Client with WithFairness.
type Policy[L Lock] struct {
	c       Core[L]
	line    Line[L]       // fair waiters that a release may hand the lock to
	handed  atomic.Uint64 // locks handed to a waiter of this client by its releases' rounds
	taken   atomic.Uint64 // locks a waiter of this client took from handoffs pushed by the masters (takePushed)
	passed  atomic.Uint64 // ... and without a round (see passOn)
	tag     string        // 8 hex digits in the ids of this client's queued waiters
	stamped atomic.Int64  // the last arrival stamp given (see stamp)
	entry   time.Duration // the TTL of a waiter's queue entry (WithFairness)
	errs    Errors
}

// New is the fair policy of core c.
func New[L Lock](c Core[L], cfg Config) *Policy[L] {
	p := &Policy[L]{c: c, tag: cfg.Tag, entry: cfg.Entry, errs: cfg.Errors}
	p.line.Wall = cfg.Wall
	return p
}

// Handed, Taken and Passed count the locks given to this client's
// waiters: by its releases' handoff rounds, from handoffs the masters
// pushed, and in-process without a round.
func (p *Policy[L]) Handed() uint64 { return p.handed.Load() }
func (p *Policy[L]) Taken() uint64  { return p.taken.Load() }
func (p *Policy[L]) Passed() uint64 { return p.passed.Load() }

// Inspect reports fn of this client's waiters listed on key, in line order
// (for tests).
func (p *Policy[L]) Inspect(key string, fn func([]State) bool) bool { return p.line.Inspect(key, fn) }

// Stale is the queue entries that l's release removes, left behind by the
// waiters a chain of passes in-process went through (nil: none).
func (p *Policy[L]) Stale(l L) []string {
	switch k := p.c.Kept(l).(type) {
	case *chain:
		return k.stale
	case *entry:
		return []string{k.name}
	}
	return nil
}

func (p *Policy[L]) Join(ctx context.Context, resource string, ttl time.Duration) (wait.Waiter[L], error) {
	cfg := p.c.WaitConfig()
	f := &waiter[L]{Base: wait.Base[L]{Config: cfg, Resource: resource, TTL: ttl, Rnd: p.c.Stream()}, c: p.c, p: p}
	return f, f.queueBehindOurs(ctx)
}

// Unlock passes l on to the next waiter of this client on its key, when
// there is one: in-process when it is covered and most of the lease is
// left (passOn), else in a handoff round (handOff). A lock that had ended
// is released as usual, and the waiter then tries in a round of its own.
func (p *Policy[L]) Unlock(ctx context.Context, l L, until time.Time, untilBoot time.Duration, lost error) (bool, func(), error) {
	keys := p.c.Keys(l)
	if len(keys) != 1 {
		return false, nil, nil // a lock on several resources: never queued
	}
	q, covered, lazy := p.line.Pick(keys[0])
	switch {
	case q == nil:
		return false, nil, nil
	case lost != nil:
		// Its keys may be gone and another client may hold the lock:
		// nothing of it is passed on. A plain release, then q tries in a
		// round of its own.
		return false, func() { p.line.Unpick(q) }, nil
	case covered && p.passable(q, until, untilBoot): // never a waiter that Claimed (Line.Pick)
		return true, nil, p.passOn(ctx, l, q, until, untilBoot)
	case lazy:
		// No entry of q's for the masters to hand the key to: a plain
		// release, then q's first attempt.
		return false, func() { p.line.Unpick(q) }, nil
	}
	return true, nil, p.handOff(ctx, l, q)
}

// waiter is one Lock call of the fair policy. Its first attempt is a
// plain one (SET NX), unless waiters of its client are queued already;
// the first loss to a holder queues it.
type waiter[L Lock] struct {
	wait.Base[L]
	c      Core[L]
	p      *Policy[L]
	w      *push.Waiter  // nil until queued: an uncontended Lock pays nothing
	q      *queued[L]    // nil until then too
	grant  <-chan L      // where a release of this client hands us the lock
	handed L             // one it handed us, not taken yet (zero: none)
	took   L             // the lock this call returns (zero: none yet)
	won    *quorum.Round // took's round
	// Our entry may be on every master though won removed it on some:
	// a lock passed on removes none, and a call of an earlier attempt of
	// ours may put it back where a handoff removed it.
	everywhere bool
	attempt    *replies // what the masters said in the latest queued attempt (nil: none made)
}

// queued is one Lock call that waits in the masters' queues.
type queued[L Lock] struct {
	*Waiter[L]
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

// leaving is q's entry as drop_entries reads it when q's call ends with
// token, the lock it won ("": none): a key that a release handed to
// another of q's tokens is released, one that holds token is not.
func (q *queued[L]) leaving(token string) string {
	if strings.HasPrefix(token, q.prefix) {
		return q.Entry + " " + token
	}
	return q.Entry
}

// token is the token of q's next attempt.
func (q *queued[L]) token() string {
	q.tries++
	return q.prefix + "." + strconv.FormatUint(q.tries, 16)
}

// replies is what fair_lock.lua said on each master in one attempt.
// Calls that outlive their round write after it was read: they are dropped.
type replies struct {
	mu      sync.Mutex
	r       []push.Holder
	foreign []int64 // the stamp of the first waiter of another client queued (NoForeign: none)
	over    bool
	claim   string // "1": the attempt writes its entry's claim (Line.Claims); "": it removes one
}

func (f *replies) set(i int, r push.Holder, foreign int64) {
	f.mu.Lock()
	if !f.over {
		f.r[i], f.foreign[i] = r, foreign
	}
	f.mu.Unlock()
}

// read ends the attempt's replies: later calls are dropped.
func (f *replies) read() ([]push.Holder, []int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.over = true
	return f.r, f.foreign
}

// Try takes a lock handed to us, or else makes an attempt (see wait.Waiter).
func (f *waiter[L]) Try(ctx context.Context) (L, *quorum.Round, error, bool) {
	var none L
	p, q := f.p, f.q
	if f.handed == none && f.grant != nil {
		select {
		case f.handed = <-f.grant:
		default:
		}
	}
	if h := f.handed; h != none {
		f.handed = none
		l, err := f.take(ctx, h)
		if err == nil {
			f.took, f.won = l, f.c.Round(l)
			f.everywhere = p.passedOn(l) || p.line.Raced(q.Waiter)
			return l, nil, nil, true
		}
		if errors.Is(err, fence.ErrCounterRegressed) {
			return none, nil, err, true
		}
	}
	if q == nil {
		// Not queued yet: a plain attempt, which takes a free key.
		l, round, err := f.c.Attempt(ctx, f.c.NewLock(f.Resource, wait.NewToken(f.Rnd)), f.TTL, nil)
		if err == nil {
			f.took, f.won = l, f.c.Round(l)
		}
		return l, round, err, true
	}
	if l, err, ok := f.takePushed(ctx); ok {
		if err == nil {
			f.took, f.won = l, f.c.Round(l)
		}
		return l, nil, err, true
	}
	q.pushed = p.readyQueued(ctx, f.w)
	if !p.line.Attempting(q.Waiter, true, false) {
		f.handed = <-q.Grant // passed to us since the check above
		return none, nil, nil, false
	}
	l := f.c.NewLock(f.Resource, q.token())
	f.w.SetOwn(l.Token())
	a := &queuedAsk[L]{f: f}
	l, round, err := f.c.Attempt(ctx, l, f.TTL, a)
	f.attempt = a.rep
	p.line.Attempting(q.Waiter, false, round != nil && round.Count(quorum.Pending) > 0)
	// Our entry is on the masters now: a release may hand us the lock.
	p.line.List(q.Waiter)
	f.grant = q.Grant
	if err == nil {
		f.took, f.won = l, f.c.Round(l)
	}
	return l, round, err, true
}

// queuedAsk is one queued attempt of f (a wait.Asker). Its replies are its
// own: calls that outlive the round write there, never into the next
// attempt's.
type queuedAsk[L Lock] struct {
	f   *waiter[L]
	rep *replies
}

// Prepare readies the attempt: whether it writes its entry's claim,
// decided under the line's mutex with the picks of this client's releases
// (Line.Claims).
func (a *queuedAsk[L]) Prepare(L, time.Duration) time.Duration {
	n := a.f.c.Masters()
	a.rep = &replies{r: make([]push.Holder, n), foreign: make([]int64, n)}
	if a.f.p.line.Claims(a.f.q.Waiter) { // marks q Claimed
		a.rep.claim = "1"
	}
	return 0
}

// Ask is master i's call of the attempt: true when the key is ours.
func (a *queuedAsk[L]) Ask(ctx context.Context, i int, l L, ttl time.Duration) (bool, error) {
	f, q, rep := a.f, a.f.q, a.rep
	return wait.Call(f.c, ctx, i, func(ctx context.Context, m driver.Conn) (bool, error) {
		vals, err := wait.EvalSlice(ctx, m, LockScript, q.keys, l.Token(), ttl.Milliseconds(), q.ID, q.At, q.ttlMS, f.p.tag, q.prefix, rep.claim)
		if err != nil {
			return false, err
		}
		if len(vals) == 1 && vals[0] == int64(1) {
			return true, nil
		}
		if len(vals) != 4 {
			return false, fmt.Errorf("%w: %v from the fair lock script", driver.ErrUnexpectedReply, vals)
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
// may hand the key to its token later (takePushed). Lost, its refusals set
// nothing, and where it won it is undone with its entry put back where it
// took the key (fair_undo.lua).
func (a *queuedAsk[L]) Asked(l L, round *quorum.Round, start time.Time, boot time.Duration) {
	q := a.f.q
	q.latest = queuedAttempt{token: l.Token(), ttl: a.f.c.TTL(l), start: start, boot: boot, round: round}
	a.f.c.Queued(l, wait.Script{Script: UndoScript, Args: []any{l.Token(), q.ID, q.At, q.ttlMS}})
}

// Unasked: a queued attempt asks every master.
func (a *queuedAsk[L]) Unasked(*quorum.Round, int) bool { return false }

// Sleep waits after a lost attempt (see wait.Waiter): the first loss to a
// holder queues the call and returns at once, for its first queued
// attempt; later ones sleep as planQueued says, or until a lock is handed
// to us.
func (f *waiter[L]) Sleep(ctx context.Context, round *quorum.Round, err error, held bool) error {
	pause := f.Poll()
	var wake <-chan struct{}
	if round != nil && held {
		key := "lock:" + f.Resource
		if f.w == nil {
			f.w = f.p.joinWait(key)
			f.q = f.p.enqueue(key, f.TTL, f.w, f.Rnd)
			return nil // the first queued attempt enqueues us, now
		}
		pause = f.p.planQueued(f.w, round, f.q, f.attempt, pause, f.Rnd)
		wake = f.w.Wake()
	}
	h, err := f.Rest(ctx, pause, wake, f.grant, nil, false, err)
	var none L
	if h != none {
		f.handed = h
	}
	return err
}

// End undoes what waiting made: a lock handed to us and not taken is
// freed, the subscriptions left, and for a queued call its place in this
// client's line and on the masters given up.
func (f *waiter[L]) End(ctx context.Context) {
	var none L
	p, q := f.p, f.q
	if f.handed != none {
		f.c.Abandon(ctx, f.handed, nil)
		f.handed = none
	}
	f.Stop()
	if f.w != nil {
		f.w.Leave()
	}
	if q == nil {
		return
	}
	if left := p.line.Unlist(q.Waiter, f.took); left != none {
		f.c.Abandon(ctx, left, nil)
	}
	if f.took == none || !p.passedOn(f.took) {
		token := ""
		if f.took != none {
			token = f.took.Token()
			p.keepEntry(f.took, q)
		}
		p.dequeue(ctx, q, f.won, f.everywhere, token) // a lock passed on carries our entry in its stale list
	}
}

// entry is what the policy keeps with a lock that a queued call won (the
// core's Kept): the call's queue entry, as drop_entries reads it.
type entry struct{ name string }

// keepEntry makes the release of l, which q's call won, remove q's entry
// where it is still queued, in the same script (handoff.lua with no
// waiter to hand to). The leave that End sends keeps a key that holds l's
// token (it goes with the lock), and it may reach a master after l's
// Unlock: a master that refused the winning attempt still queues the
// entry with l's token as its claim, and another holder's release there
// hands the key back to l's token after Unlock has passed that master,
// where it stayed for a TTL (the simulator, seed 1234226749272432728). A
// lock passed on in-process from l carries the entry on (Stale).
func (p *Policy[L]) keepEntry(l L, q *queued[L]) {
	name := q.leaving(l.Token())
	p.c.Keep(l, &entry{name: name}, &wait.Script{Script: HandoffScript, Args: []any{l.Token(), "", "", 0, name}})
}

// take makes a lock handed over by a release (see handoff.go) ours: its
// fence is minted here, within its validity. A lock it cannot take (no
// fence) is freed, and the call goes on waiting: when the lock was passed
// in-process, our entry is among those its release removes as left behind
// by a waiter that took it (see passOn); it is taken off that list, or the
// release would remove the entry of a waiter still queued, and delete the
// key its next attempt sets (found by the simulator: a lock held on two
// masters of five; TestFailedTakeKeepsEntryVirtual).
func (f *waiter[L]) take(ctx context.Context, l L) (L, error) {
	if err := f.c.Mint(ctx, l, f.p.until(l)); err != nil {
		if ch := f.p.chainOf(l); ch != nil && f.q != nil {
			f.p.setStale(l, slices.DeleteFunc(slices.Clone(ch.stale), func(e string) bool { return e == f.q.Entry }))
		}
		f.c.Abandon(ctx, l, nil)
		var none L
		return none, err
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
func (f *waiter[L]) queueBehindOurs(ctx context.Context) error {
	p := f.p
	key := "lock:" + f.Resource
	ours := p.line.WaitedOn(key)
	if !ours && !f.c.Hub().Subscribed(key) {
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
		return errors.Join(p.errs.NotAcquired, err)
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
func (f *waiter[L]) takePushed(ctx context.Context) (l L, err error, ok bool) {
	c, q := f.c, f.q
	a := q.latest
	if a.round == nil {
		return l, nil, false
	}
	f.w.Handed(q.handed)
	var agreed []bool // the masters that count
	n := 0
	for i, t := range q.handed {
		if t == a.token && wait.Refused(a.round, i) && !c.Quarantined(i) {
			if agreed == nil {
				agreed = make([]bool, c.Masters())
			}
			agreed[i] = true
			n++
		}
	}
	if n < c.Quorum() {
		return l, nil, false
	}
	lease := c.Lease(a.ttl)
	deadline, untilBoot := a.start.Add(lease), a.boot+lease
	now, boot := c.Now()
	if left := min(deadline.Sub(now), untilBoot-boot); left < lease/4*3 {
		return l, nil, false
	}
	q.latest = queuedAttempt{}
	l = c.NewLock(f.Resource, a.token)
	c.Hold(l, quorum.Settled(agreed), deadline, untilBoot, a.ttl)
	if err := c.Mint(ctx, l, deadline); err != nil {
		c.AbandonRound(ctx, l)
		var none L
		return none, err, true
	}
	f.p.taken.Add(1)
	now, _ = c.Now()
	c.Attempted(now.Sub(a.start), deadline.Sub(now))
	return l, nil, true
}

// enqueue makes the queued state of a Lock call on key for ttl, woken by
// w. The queue's names are scripts/queue.lua's, derived on the masters.
func (p *Policy[L]) enqueue(key string, ttl time.Duration, w *push.Waiter, rnd *rand.Rand) *queued[L] {
	c := p.c
	now := p.stamp()
	id := fmt.Sprintf("%014x%s%08x", now, p.tag, wait.RandUint32(rnd))
	w.SetID(id, c.Masters(), c.Quorum(), push.HandoffChannel(key, p.tag))
	wake := w.Wake()
	prefix := wait.NewToken(rnd)
	q := &queued[L]{
		Waiter: NewWaiter[L](id, now, key, ttl.Truncate(time.Millisecond), func() { push.Signal(wake) }),
		wake:   wake,
		keys:   []string{key},
		ttlMS:  p.entry.Milliseconds(),
		prefix: prefix,
		handed: make([]string, c.Masters()),
	}
	q.Entry = id + " " + prefix
	return q
}

// stamp is an arrival stamp: µs since the Unix epoch, and above every
// stamp this client gave before, so that its waiters line up in the order
// they arrived even when the clock gives two of them the same µs (a tie
// would go to the random part of the ids).
func (p *Policy[L]) stamp() int64 {
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
func (p *Policy[L]) joinWait(key string) *push.Waiter {
	return p.c.Hub().JoinQueued(key, push.HandoffChannel(key, p.tag))
}

// foreignStamp reads fair_lock.lua's fourth reply: the arrival stamp of the
// first waiter of another client queued, in hex µs, or "" for none
// (NoForeign).
func foreignStamp(v any) (int64, error) {
	s, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("%w: %v for the first foreign waiter from the fair lock script", driver.ErrUnexpectedReply, v)
	}
	if s == "" {
		return NoForeign, nil
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
func (p *Policy[L]) readyQueued(ctx context.Context, w *push.Waiter) bool {
	c := p.c
	w.Drain()
	w.SetHolder("")
	w.Expect(0)
	w.Expect(c.Quorum()) // until planQueued knows better
	return w.Listening(ctx, c.Quorum(), c.NodeTimeout())
}

// planQueued is the plain policy's plan for a queued waiter, from the
// replies rep of its attempt: it sleeps until the key may be free for it,
// a release that names it the head wakes it, and it wakes in time to
// refresh its entry.
func (p *Policy[L]) planQueued(w *push.Waiter, round *quorum.Round, q *queued[L], rep *replies, poll time.Duration, rnd *rand.Rand) time.Duration {
	c := p.c
	replies, foreigns := rep.read()
	answered, foreign := 0, int64(NoForeign)
	for i, r := range replies {
		if r.OK {
			answered++
			foreign = min(foreign, foreigns[i])
		}
	}
	if answered >= c.Quorum() {
		p.line.Observe(q.Waiter, foreign)
	}
	free, known, holder := push.WakeAfter(round, replies, c.Quorum())
	w.SetHolder(holder)
	// The masters held by a token must publish its release; a majority is
	// free once all but n-quorum of them did.
	held := 0
	for _, r := range replies {
		if r.OK && r.Token != "" && r.Token != reserved {
			held++
		}
	}
	w.Expect(max(held-(c.Masters()-c.Quorum()), 1))
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
// agreed, or on every master when everywhere. Calls of won still running
// are waited for first, until its round ends: a handoff round's call that
// hands q the key removes the entry itself, and a leave that reached that
// master before it left the handoff no head there, so the key was
// released, not handed (TestHandoffOutrunByLeaveVirtual). A key that a
// release handed to one of q's tokens there is released too, unless it
// holds token, the lock's: that one goes with the lock. An entry that a
// late call adds again expires.
func (p *Policy[L]) dequeue(ctx context.Context, q *queued[L], won *quorum.Round, everywhere bool, token string) {
	if won != nil && !everywhere && won.Count(quorum.Agreed) == p.c.Masters() {
		return
	}
	leave := func() {
		p.leave(ctx, q.keys, []any{q.leaving(token)}, q.TTL, func(i int) bool {
			if won == nil || everywhere {
				return false
			}
			// Calls that won after their round ended removed the entry too.
			agreed, _, ok := won.Returned(i)
			return ok && agreed
		})
	}
	if won == nil || won.Count(quorum.Pending) == 0 {
		leave()
		return
	}
	p.c.Go(func() {
		<-won.Done()
		leave()
	})
}

// leave removes the queue entries of keys (the lock key; entries as
// Waiter.Entry names them, scripts/fair_leave.lua) in the background,
// on every master but those skip names, each bounded by the node timeout,
// and releases a key handed to one of them (set for at most ttl). A call
// that gets no reply is tried again in the background (the core's
// retries); an entry that a late call adds again expires.
func (p *Policy[L]) leave(ctx context.Context, keys []string, entries []any, ttl time.Duration, skip func(int) bool) {
	c := p.c
	ctx = context.WithoutCancel(ctx)
	c.Go(func() { p.leaveNow(ctx, keys, entries, ttl, skip) })
}

// leaveNow is leave, waiting for every master's answer or the node timeout.
func (p *Policy[L]) leaveNow(ctx context.Context, keys []string, entries []any, ttl time.Duration, skip func(int) bool) {
	c := p.c
	quorum.Group{Nodes: c.Masters(), Timeout: c.NodeTimeout()}.Do(ctx, func(ctx context.Context, i int) (bool, error) {
		if skip != nil && skip(i) {
			return true, nil
		}
		_, err := wait.Call(c, ctx, i, func(ctx context.Context, m driver.Conn) (any, error) {
			return m.Eval(ctx, LeaveScript, keys, entries...)
		})
		if !driver.Replied(err) {
			// Left on the master, the entry may become the queue's head
			// there while others have other heads: nobody wins the
			// reserved key until it expires. Tried again.
			c.WaitConfig().Logger.Debug("redlock: leaving the wait queue got no reply; retrying in the background", "err", c.MasterError(i, "leave the wait queue", err))
			c.RetryScript(i, LeaveScript, keys, entries, max(ttl, p.entry), keys[0])
		}
		return err == nil, err
	})
}

// chain is what the policy keeps with a lock passed on in-process (the
// core's Kept): the queue entries of this client's waiters that passOn
// left behind, which the lock's release removes (handoff.lua).
type chain struct {
	stale []string
}

// chainOf is l's chain, nil for a lock that was not passed on in-process.
func (p *Policy[L]) chainOf(l L) *chain {
	ch, _ := p.c.Kept(l).(*chain)
	return ch
}

// passedOn reports a lock passed on in-process (see passOn): its token,
// keys, round and lease are its predecessor's.
func (p *Policy[L]) passedOn(l L) bool { return p.chainOf(l) != nil }

// carriesEntries reports whether l's release removes queue entries: those
// of the waiters of a chain of passes (Stale), or the entry of the queued
// call that won l (keepEntry). That release goes to every master, also
// those that l's acquiring round never called (a handoff round asks only
// the releaser's majority; a breaker holds calls back): the entries may be
// there all the same, put there by an earlier attempt or an undo, and one
// left at the head of a master's queue keeps the key from every other
// waiter until it expires (TestHandOffFromChainReachesStuckMasters).
func (p *Policy[L]) carriesEntries(l L) bool {
	switch k := p.c.Kept(l).(type) {
	case *chain:
		return len(k.stale) > 0
	case *entry:
		return true
	}
	return false
}

// setStale makes l a lock passed on in-process whose release removes the
// entries stale.
func (p *Policy[L]) setStale(l L, stale []string) {
	var by *wait.Script
	if len(stale) > 0 {
		by = &wait.Script{Script: HandoffScript, Args: append([]any{l.Token(), "", "", 0}, strs(stale)...)}
	}
	p.c.Keep(l, &chain{stale: stale}, by)
}

// until is the end of l's lease, as the core holds it.
func (p *Policy[L]) until(l L) time.Time {
	until, _ := p.c.Until(l)
	return until
}

func strs(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
