package redlock

import (
	"context"
	_ "embed"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/fence"
	"quorumlock.dev/quorum"
	"quorumlock.dev/redlock/internal/push"
)

// How a Lock call waits after an attempt lost to another holder: it reads
// who holds the key and for how long on the masters that refused, and
// sleeps until a majority of keys will have expired, or until the holder's
// release is published (scripts/release.lua) on a channel named like the
// key, whichever comes first (package push). With [WithFairness] it queues
// instead (fair.go, package fair). docs/design.md ("Waiting for a held
// lock") says why it is built this way.

// wakeJitter spreads the waiters that wake at one expiry, so that they do
// not all send their SETs at the same instant.
const wakeJitter = time.Millisecond

// maxWakeBackoff bounds the random wait before an attempt after
// consecutive wake-ups that each led to a lost attempt (see afterWake).
const maxWakeBackoff = 16 * time.Millisecond

// lockWait is one Lock or LockAll call between its attempts: the wait
// policy. The plain policy (w alone) is made at the first attempt lost to a
// holder; the fair one (w and q) too, or at once when waiters of this
// client are queued on the resource. A LockAll call (multi) polls.
type lockWait struct {
	c        *Client
	resource string
	multi    []string
	ttl      time.Duration
	timer    *time.Timer
	waiting  bool         // the Waiting hook was told that this call waits
	w        *push.Waiter // nil until the first contended loss: an uncontended Lock pays nothing
	q        *queued      // fair: nil until then too
	grant    <-chan *Lock // where a release of this client hands us the lock
	handed   *Lock        // one it handed us, not taken yet
	took     *Lock        // the lock this call returns
	won      *quorum.Round
	woken    int        // sleeps in a row that a release cut short (see afterWake)
	probed   bool       // the last attempt asked the probe master first, and lost there
	view     probeView  // what the probe master said of the holder then, when the waiter marked its log before
	rnd      *rand.Rand // the call's random stream (nil: the process's; see Client.stream)
}

// wait is the loop of Lock and LockAll: attempt (or take a lock handed
// over), then ask the policy how to wait, until a win, a fatal error, the
// attempt cap or the end of ctx.
func (c *Client) wait(ctx context.Context, lw *lockWait) (*Lock, error) {
	if err := ctx.Err(); err != nil {
		return nil, c.notAttempted(err)
	}
	defer lw.end(ctx)
	if err := lw.queueBehindOurs(ctx); err != nil {
		return nil, err
	}
	// last is the error of the last attempt the caller's context did not
	// cut short: a round cut short with masters still to answer is
	// reported only when no attempt before it ended by itself (its masters
	// had no time to say that others hold the lock).
	var last error
	for n := 0; ; {
		if err := ctx.Err(); err != nil {
			lw.abandon(ctx)
			if last == nil {
				return nil, c.notAttempted(err)
			}
			return nil, errors.Join(last, err)
		}
		l, round, err, tried := lw.try(ctx)
		if !tried {
			continue // a lock was handed to us instead
		}
		if !cutShort(ctx, round) || last == nil {
			last = err
		}
		switch {
		case err == nil:
			return l, nil
		case c.fatal(err):
			return nil, err
		case ctx.Err() != nil && last != err:
			return nil, errors.Join(last, ctx.Err())
		case ctx.Err() != nil:
			return nil, err
		}
		if n++; c.cfg.attempts > 0 && n >= c.cfg.attempts {
			return nil, err
		}
		if err := lw.sleep(ctx, round, err); err != nil {
			return nil, err
		}
	}
}

// fatal reports, and logs, an error that retrying cannot cure.
func (c *Client) fatal(err error) bool {
	switch {
	case errors.Is(err, fence.ErrCounterRegressed):
		// Retrying would only mint more values the counter may have handed
		// out before: an operator must look at it.
		c.cfg.logger.Error("redlock: fence counter went backwards; not retrying", "err", err)
		return true
	case errors.Is(err, ErrWrongType):
		// Such a key does not go away by itself: waiting would be for ever.
		c.cfg.logger.Error("redlock: the lock's key holds another type on a majority of masters; not retrying", "err", err)
		return true
	}
	return false
}

// try takes a lock handed to us, or else makes an attempt; tried is false
// when a lock was handed to us just as a queued attempt was to start (the
// loop takes it next).
func (lw *lockWait) try(ctx context.Context) (l *Lock, round *quorum.Round, err error, tried bool) {
	c, q := lw.c, lw.q
	if lw.handed == nil && lw.grant != nil {
		select {
		case lw.handed = <-lw.grant:
		default:
		}
	}
	if h := lw.handed; h != nil {
		lw.handed = nil
		l, err := c.take(ctx, h, q)
		if err == nil {
			lw.took, lw.won = l, l.round
			if l.passed || c.line.Raced(q.Waiter) {
				// Our entry is still queued (a lock passed on removes
				// none), or may be back where the handoff removed it.
				lw.won = nil
			}
			return l, nil, nil, true
		}
		if errors.Is(err, fence.ErrCounterRegressed) {
			return nil, nil, err, true
		}
	}
	if q != nil {
		if l, err, ok := lw.takePushed(ctx); ok {
			if err == nil {
				lw.took, lw.won = l, l.round
			}
			return l, nil, err, true
		}
		q.pushed = c.readyQueued(ctx, lw.w)
		if !c.line.Attempting(q.Waiter, true, false) {
			lw.handed = <-q.Grant // passed to us since the check above
			return nil, nil, nil, false
		}
	}
	switch {
	case lw.multi != nil:
		l, _ = c.newMulti(lw.multi, lw.ttl, lw.rnd) // checked by LockAll
	case q != nil:
		l = newLock(c, lw.resource, q.token())
	default:
		l = newLock(c, lw.resource, newToken(lw.rnd))
		if len(c.masters) >= 3 && (lw.w != nil || c.cfg.fairTTL <= 0 && c.push.Subscribed("lock:"+lw.resource)) {
			// Waiting on a holder, with the other waiters its release
			// wakes, or a first attempt on a resource this client
			// waited for within the last second (a releaser taking its
			// next turn races the waiters its release woke): ask one
			// master first (see probeMaster). An uncontended Lock asks
			// every master at once.
			l.probe = c.probeMaster(lw.resource) + 1
		}
	}
	// A probe's refusal says who holds the key there; the wait uses it when
	// a release there since then cannot pass unseen (see plan).
	marked := lw.w != nil && l.probe > 0 && lw.w.ListeningAt(l.probe-1)
	if lw.w != nil {
		lw.w.SetOwn(l.token)
		if marked {
			lw.w.Mark() // see plan: its releases from now on are logged
		}
	}
	sent := l
	l, round, err = c.attemptLock(ctx, l, lw.ttl, q)
	lw.probed = round != nil && probeLost(round)
	lw.view = probeView{}
	if lw.probed && marked && sent.probed.OK {
		// Read before the refusal's round ended: every other call of it
		// waited for the probe's.
		lw.view = probeView{i: sent.probe - 1, holder: sent.probed, ok: true}
	}
	if q != nil {
		c.line.Attempting(q.Waiter, false, round != nil && round.Count(quorum.Pending) > 0)
		// Our entry is on the masters now: a release may hand us the lock.
		c.line.List(q.Waiter)
		lw.grant = q.Grant
	}
	if err == nil {
		lw.took, lw.won = l, l.round
	}
	return l, round, err, true
}

// sleep waits after the lost attempt round (err its error): for the
// holder's release or expiry after a loss to a holder, the retry delay
// after anything else, or a lock handed to us. It returns an error only
// when ctx ends.
func (lw *lockWait) sleep(ctx context.Context, round *quorum.Round, err error) error {
	c := lw.c
	if !lw.waiting && c.cfg.hooks.Waiting != nil {
		lw.waiting = true
		c.cfg.hooks.Waiting(1)
	}
	wait := c.cfg.delay
	if c.cfg.jitter > 0 {
		wait += randN(lw.rnd, c.cfg.jitter)
	}
	var wake <-chan struct{}
	if round != nil && lw.multi == nil && errors.Is(err, ErrNotAcquired) {
		key := "lock:" + lw.resource
		if lw.w == nil {
			lw.w = c.joinWait(key)
			if c.cfg.fairTTL > 0 {
				lw.q = c.enqueue(key, lw.ttl, lw.w, lw.rnd)
				return nil // the first queued attempt enqueues us, now
			}
		}
		if lw.q != nil {
			wait = c.planQueued(lw.w, round, lw.q, wait, lw.rnd)
		} else {
			wait = c.plan(ctx, lw.w, round, key, wait, lw.rnd, lw.view)
		}
		wake = lw.w.Wake()
	}
	c.cfg.logger.Debug("redlock: retrying", "resource", lw.resource, "wait", wait, "err", err)
	// What is ready already is taken in an order of its own, not by a
	// select that picks one at random (a seed of the simulator replays its
	// trace only if the order is fixed): a lock handed to us first.
	select {
	case lw.handed = <-lw.grant:
		lw.woken = 0
		return nil
	default:
	}
	if wait <= 0 {
		// At once (the holders' keys are gone from a majority): a
		// release since is no news to the attempt, which reads the masters.
		if wake != nil {
			select {
			case <-wake:
			default:
			}
		}
		lw.woken = 0
		if cerr := ctx.Err(); cerr != nil {
			return errors.Join(err, cerr)
		}
		return nil
	}
	select {
	case <-wake:
		return lw.afterWake(ctx, err)
	default:
	}
	lw.arm(wait)
	select {
	case <-lw.timer.C:
		lw.woken = 0
	case <-wake:
		return lw.afterWake(ctx, err)
	case lw.handed = <-lw.grant:
		lw.woken = 0
	case <-ctx.Done():
		return errors.Join(err, ctx.Err())
	}
	return nil
}

// arm sets the call's timer to fire after wait.
func (lw *lockWait) arm(wait time.Duration) {
	if lw.timer == nil {
		lw.timer = time.NewTimer(wait)
	} else {
		lw.timer.Reset(wait)
	}
}

// afterWake follows a release that cut the sleep short. The first one in a
// row goes straight to an attempt: the fastest way to a released lock.
// When the attempt it led to lost as well, the releases may be those of
// other waiters that lost with us (the votes split): each next one waits
// a random part of a window that grows by wakeJitter per wake, up to
// maxWakeBackoff, so that the waiters stop trying in step. Without it, two
// waiters whose attempts kept splitting the masters woke each other for
// ever, in the simulator in one instant of virtual time.
func (lw *lockWait) afterWake(ctx context.Context, err error) error {
	var wait time.Duration
	switch lw.woken++; {
	case lw.probed:
		// Lost at the probe master to the one waiter that won it: no
		// votes were split, and the next release is worth trying at once.
		lw.woken = 1
		wait = lw.probeJitter()
	case lw.woken == 1:
		wait = lw.probeJitter()
	default:
		wait = randN(lw.rnd, min(time.Duration(lw.woken-1)*wakeJitter, maxWakeBackoff))
	}
	if wait <= 0 {
		return nil
	}
	select {
	case lw.handed = <-lw.grant: // see sleep
		lw.woken = 0
		return nil
	default:
	}
	lw.arm(wait)
	select {
	case <-lw.timer.C:
	case lw.handed = <-lw.grant:
		lw.woken = 0
	case <-ctx.Done():
		return errors.Join(err, ctx.Err())
	}
	return nil
}

// probeJitter is the wait of a plain waiter, woken by a release, before
// its attempt asks the probe master: a random part of probeWindow. The
// waiters that one release wakes race for that master, and the order in
// which a master sends them its message is its order of subscription, the
// same for every release: without it the same clients won every race
// (fairness 0.22 with 8 clients taking turns). A queued waiter is woken
// alone and waits for nothing.
func (lw *lockWait) probeJitter() time.Duration {
	if lw.q != nil || lw.multi != nil || len(lw.c.masters) < 3 {
		return 0
	}
	return randN(lw.rnd, probeWindow)
}

// probeWindow bounds probeJitter: several times the spread of a release's
// messages over the waiters of one master on a local network.
const probeWindow = 100 * time.Microsecond

// abandon frees a lock handed to us that the call will not take.
func (lw *lockWait) abandon(ctx context.Context) {
	if lw.handed != nil {
		lw.handed.abandonHanded(ctx, nil)
		lw.handed = nil
	}
}

// end undoes what waiting made: the Waiting hook, the subscriptions, and
// for a queued call its place in this client's line and on the masters.
func (lw *lockWait) end(ctx context.Context) {
	c, q := lw.c, lw.q
	if lw.timer != nil {
		lw.timer.Stop()
	}
	if lw.waiting {
		c.cfg.hooks.Waiting(-1)
	}
	if lw.w != nil {
		lw.w.Leave()
	}
	if q == nil {
		return
	}
	if left := c.line.Unlist(q.Waiter, lw.took); left != nil {
		left.abandonHanded(ctx, nil)
	}
	if lw.took == nil || !lw.took.passed {
		token := ""
		if lw.took != nil {
			token = lw.took.token
		}
		c.dequeue(ctx, q, lw.won, token) // a lock passed on carries our entry in its stale list
	}
}

// plan prepares w for the wait after the lost round: it returns how long
// to sleep. A message on w's wake channel cuts the sleep short.
func (c *Client) plan(ctx context.Context, w *push.Waiter, round *quorum.Round, key string, poll time.Duration, rnd *rand.Rand, view probeView) time.Duration {
	// Any release until we know who holds the key wakes us; one that came
	// before this point is seen by the read below.
	w.Drain()
	w.SetHolder("")
	w.Expect(0)
	pushed := w.Listening(ctx, c.quorum, c.cfg.nodeTimeout)
	lost := probeLost(round)
	var replies []push.Holder
	if view.ok && lost {
		// The probe master said who held the key when it refused, which
		// saves reading it again (one call per waiter a release wakes).
		// What that read would add is a release since: one the log
		// that the attempt marked holds (drained above, or not) reads as
		// the key gone; one still to come wakes us (any, from here on).
		replies = make([]push.Holder, len(c.masters))
		replies[view.i] = view.holder
		if w.ReleasedAt(view.i, view.holder.Token) {
			replies[view.i] = push.Holder{PTTL: -2, OK: true}
		}
	} else {
		replies = c.readHolders(ctx, round, key)
	}
	free, known, holder := push.WakeAfter(round, replies, c.quorum)
	if lost && !known {
		// Only the probe master answered: its holder is the one that
		// won the others after it (or releases it when it did not).
		// When its key is gone since it refused (the holder's release
		// landed between that call and this read, its message drained
		// above), the next attempt may win there: at once, not after
		// the poll interval.
		for _, r := range replies {
			switch {
			case r.OK && r.PTTL >= 0 && r.Token != "":
				free, known, holder = time.Duration(r.PTTL)*time.Millisecond, true, r.Token
			case r.OK && r.PTTL == -2 && holder == "":
				free, known = 0, true
			}
		}
	}
	w.SetHolder(holder)
	if holder != "" {
		// Wake once the holder's releases have freed a majority: at its
		// first message the next attempt would find its keys on the
		// masters that have not released yet, and lose there.
		// A master whose reply the round did not wait for may hold it
		// too. After a loss at the probe master, whose holder may hold
		// nothing else (it lost the others and releases it), its release
		// there is the one to wake for.
		held := len(c.masters)
		for i, r := range replies {
			if round.Answer(i) == quorum.Agreed || (r.OK && r.PTTL == -2) {
				held--
			}
		}
		if lost {
			held = 1
		}
		w.Expect(max(held-(len(c.masters)-c.quorum), 1))
	}
	if !known {
		return poll
	}
	if free > 0 || !pushed {
		// Expiry follows the masters' clocks, not ours: a waiter that wakes
		// a little early finds the key there and reads its TTL again.
		free += randN(rnd, wakeJitter)
	}
	if !pushed {
		// No release reaches us: look again at the poll interval.
		return min(free, poll)
	}
	return free
}

// probeView is what an attempt's probe master said of the key when it
// refused it (probeCall): master i, its holder and PTTL.
type probeView struct {
	i      int
	holder push.Holder
	ok     bool
}

// probeLost reports a round lost at its probe master: the others were
// not asked.
func probeLost(round *quorum.Round) bool {
	for i := range round.Nodes() {
		if errors.Is(round.Err(i), errNotProbed) {
			return true
		}
	}
	return false
}

// holderOf reads a script's reply of who holds a key, its token (nil: none)
// and PTTL in ms, as holder.lua gives them and probe.lua and fair_lock.lua
// give them too: OK is false when the PTTL is not an integer.
func holderOf(token, pttl any) push.Holder {
	h := push.Holder{}
	h.Token, _ = token.(string)
	h.PTTL, h.OK = pttl.(int64)
	// Redis takes a PX up to ~9.2e12 ms; as a time.Duration that
	// overflows, and a wait computed from it came out negative: every
	// waiter retried at once until its context ended.
	h.PTTL = min(h.PTTL, maxPTTL)
	return h
}

// maxPTTL is the longest remaining TTL, in ms, that a waiter reads from a
// master: a year. A key set for longer is waited for as if it ends then (a
// release still wakes the waiters).
const maxPTTL = int64(365 * 24 * time.Hour / time.Millisecond)

// readHolders runs the holder script on the masters that refused round,
// each bounded by the node timeout; a master that did not answer in time
// has OK false.
func (c *Client) readHolders(ctx context.Context, round *quorum.Round, key string) []push.Holder {
	n := len(c.masters)
	var mu sync.Mutex // the calls that time out write after Do returned
	replies := make([]push.Holder, n)
	over := false
	keys := []string{key}
	quorum.Group{Nodes: n, Timeout: c.cfg.nodeTimeout}.Do(ctx, func(ctx context.Context, i int) (bool, error) {
		if round.Answer(i) != quorum.Refused {
			return true, nil
		}
		vals, err := call(c, ctx, i, func(ctx context.Context, m driver.Conn) ([]any, error) {
			return evalSlice(ctx, m, holderScript, keys)
		})
		if err != nil || len(vals) != 2 {
			return false, err
		}
		r := holderOf(vals[0], vals[1])
		mu.Lock()
		if !over {
			replies[i] = r
		}
		mu.Unlock()
		return true, nil
	})
	mu.Lock()
	over = true
	out := slices.Clone(replies)
	mu.Unlock()
	return out
}
