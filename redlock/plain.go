package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/quorum"
	"quorumlock.dev/redlock/internal/push"
)

// The plain wait policy: after an attempt lost to a holder, a Lock call
// reads who holds the key and for how long on the masters that refused,
// and sleeps until a majority of keys will have expired, or until the
// holder's release is published (scripts/release.lua) on a channel named
// like the key, whichever comes first (package push). Woken with other
// waiters by one release, it asks one master first (probeAsk), so that
// they do not split the votes. docs/design.md ("Waiting for a held lock")
// says why it is built this way.

// plainPolicy is a Client without [WithFairness].
type plainPolicy struct{ c *Client }

func (p plainPolicy) join(_ context.Context, resource string, ttl time.Duration) (waiter, error) {
	return &plainWait{waitBase: waitBase{c: p.c, resource: resource, ttl: ttl, rnd: p.c.stream()}}, nil
}

func (plainPolicy) unlock(context.Context, *Lock, time.Time, time.Duration, error) (bool, func(), error) {
	return false, nil, nil
}

// plainWait is one Lock call of the plain policy.
type plainWait struct {
	waitBase
	w      *push.Waiter // nil until the first loss to a holder: an uncontended Lock pays nothing
	probed bool         // the last attempt asked the probe master first, and lost there
	view   probeView    // what the probe master said of the holder then, when the waiter marked its log before
}

func (p *plainWait) try(ctx context.Context) (*Lock, *quorum.Round, error, bool) {
	c := p.c
	l := newLock(c, p.resource, newToken(p.rnd))
	var a *probeAsk
	if len(c.masters) >= 3 && (p.w != nil || c.push.Subscribed("lock:"+p.resource)) {
		// Waiting on a holder, with the other waiters its release
		// wakes, or a first attempt on a resource this client
		// waited for within the last second (a releaser taking its
		// next turn races the waiters its release woke): ask one
		// master first (see probeMaster). An uncontended Lock asks
		// every master at once.
		if i := c.probeMaster(p.resource); i >= 0 {
			l.probe = i + 1
			a = &probeAsk{c: c, p: i, probed: make(chan struct{})}
		}
	}
	// A probe's refusal says who holds the key there; the wait uses it when
	// a release there since then cannot pass unseen (see plan).
	marked := p.w != nil && a != nil && p.w.ListeningAt(a.p)
	if p.w != nil {
		p.w.SetOwn(l.token)
		if marked {
			p.w.Mark() // see plan: its releases from now on are logged
		}
	}
	var ask asker // nil, not a nil *probeAsk: the round then asks SET NX
	if a != nil {
		ask = a
	}
	l, round, err := c.attemptLock(ctx, l, p.ttl, ask)
	p.probed = round != nil && probeLost(round)
	p.view = probeView{}
	if p.probed && marked && a.holder.OK {
		// Read before the refusal's round ended: every other call of it
		// waited for the probe's.
		p.view = probeView{i: a.p, holder: a.holder, ok: true}
	}
	return l, round, err, true
}

func (p *plainWait) sleep(ctx context.Context, round *quorum.Round, err error) error {
	wait := p.poll()
	var wake <-chan struct{}
	if round != nil && errors.Is(err, ErrNotAcquired) {
		key := "lock:" + p.resource
		if p.w == nil {
			p.w = p.c.push.Join(key)
		}
		wait = p.c.plan(ctx, p.w, round, key, wait, p.rnd, p.view)
		wake = p.w.Wake()
	}
	_, err = p.rest(ctx, wait, wake, nil, p.probeJitter, p.probed, err)
	return err
}

func (p *plainWait) end(context.Context) {
	p.waitBase.end()
	if p.w != nil {
		p.w.Leave()
	}
}

// probeJitter is the wait of a plain waiter, woken by a release, before
// its attempt asks the probe master: a random part of probeWindow. The
// waiters that one release wakes race for that master, and the order in
// which a master sends them its message is its order of subscription, the
// same for every release: without it the same clients won every race
// (fairness 0.22 with 8 clients taking turns).
func (p *plainWait) probeJitter() time.Duration {
	if len(p.c.masters) < 3 {
		return 0
	}
	return randN(p.rnd, probeWindow)
}

// probeWindow bounds probeJitter: several times the spread of a release's
// messages over the waiters of one master on a local network.
const probeWindow = 100 * time.Microsecond

// probeAsk is a probed attempt: it asks master p first and the others
// only if p agreed, or failed: then it is a plain attempt on the rest. A
// fallback that asked the others once the probe master was a quarter of
// the node timeout late was tried and removed: a round then ended with
// the probe master's answer unknown, and a waiter counted that master as
// the holder's, waited for a release it would never publish, and slept
// until the key's expiry (BenchmarkContended with 8 clients stalled ~25 s
// in about one run of four).
type probeAsk struct {
	c      *Client
	p      int
	probed chan struct{} // closed once the probe master answered; state says how
	state  atomic.Int32
	// Written by the probe call before probed is closed.
	holder    push.Holder // who held the key at p when it refused; OK false: not read
	wrongType bool        // p's key holds another type
}

// What a probed round's other calls do.
const (
	probeWaiting = iota
	probeRefused // the probe master refused: the others are not asked
	probeGoOn    // it agreed or failed: the others are asked
)

func (a *probeAsk) prepare(*Lock, time.Duration) {}

func (a *probeAsk) ask(ctx context.Context, i int, l *Lock, ttl time.Duration) (bool, error) {
	if i != a.p {
		select {
		case <-a.probed:
		case <-ctx.Done():
			// Never asked: this says nothing of the master.
			return false, errNotAsked
		}
		if a.state.Load() == probeRefused {
			return false, errNotProbed
		}
		return a.c.setNX(ctx, i, l, ttl)
	}
	set, err := call(a.c, ctx, i, func(ctx context.Context, m driver.Conn) (bool, error) {
		return a.probeCall(ctx, m, l, ttl.Milliseconds())
	})
	st := int32(probeGoOn)
	if err == nil && !set && !a.wrongType {
		st = probeRefused
	}
	if a.state.CompareAndSwap(probeWaiting, st) {
		close(a.probed)
	}
	return set, err
}

func (a *probeAsk) asked(*Lock, *quorum.Round, time.Time, time.Duration) {}

// probeCall is the call to the probe master, m: SET NX, and on a refusal
// who holds the key there (scripts/probe.lua), kept for the wait that
// follows. The other calls of the round start after it returns: nothing
// else writes a.holder.
func (a *probeAsk) probeCall(ctx context.Context, m driver.Conn, l *Lock, ttlMS int64) (bool, error) {
	v, err := m.Eval(ctx, probeScript, l.keys, l.token, ttlMS)
	if err != nil {
		return false, err
	}
	switch v := v.(type) {
	case int64:
		switch v {
		case 1:
			return true, nil
		case 0:
			// A key of another type: the others are asked too, so that
			// a majority of such keys ends the wait (ErrWrongType).
			a.wrongType = true
			return false, nil
		}
	case []any:
		if len(v) == 2 {
			if h := holderOf(v[0], v[1]); h.OK {
				a.holder = h
				return false, nil
			}
		}
	}
	return false, fmt.Errorf("%w: %v (%T) from the probe script", driver.ErrUnexpectedReply, v, v)
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
	replies := c.holders(ctx, w, round, key, view, lost)
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
		w.Expect(c.releasesToWait(round, replies, lost))
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

// holders is who holds key on each master after round lost. The probe
// master said who held it when it refused (view), which saves reading it
// again (one call per waiter a release wakes). What that read would add
// is a release since: one the log that the attempt marked holds (drained
// by plan, or not) reads as the key gone; one still to come wakes us
// (any, from then on). Otherwise the holders are read on the masters that
// refused.
func (c *Client) holders(ctx context.Context, w *push.Waiter, round *quorum.Round, key string, view probeView, lost bool) []push.Holder {
	if !view.ok || !lost {
		return c.readHolders(ctx, round, key, false)
	}
	replies := make([]push.Holder, len(c.masters))
	replies[view.i] = view.holder
	if w.ReleasedAt(view.i, view.holder.Token) {
		replies[view.i] = push.Holder{PTTL: -2, OK: true}
	}
	return replies
}

// releasesToWait is how many of the holder's release messages a waiter
// waits for: once they have freed a majority (at its first message the
// next attempt would find its keys on the masters that have not released
// yet, and lose there). A master whose reply the round did not wait for
// may hold it too. After a loss at the probe master (lost), whose holder
// may hold nothing else (it lost the others and releases it), its release
// there is the one to wake for.
func (c *Client) releasesToWait(round *quorum.Round, replies []push.Holder, lost bool) int {
	held := len(c.masters)
	for i, r := range replies {
		if round.Answer(i) == quorum.Agreed || (r.OK && r.PTTL == -2) {
			held--
		}
	}
	if lost {
		held = 1
	}
	return max(held-(len(c.masters)-c.quorum), 1)
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
