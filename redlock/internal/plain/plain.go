// Package plain is the lock's plain wait policy: after an attempt lost to
// a holder, a Lock call reads who holds the key and for how long on the
// masters that refused, and sleeps until a majority of keys will have
// expired, or until the holder's release is published (release.lua) on a
// channel named like the key, whichever comes first (package push). Woken
// with other waiters by one release, it asks one master first (probeAsk),
// so that they do not split the votes. docs/design.md ("Waiting for a held
// lock") says why it is built this way.
//
// The policy reaches the lock's core only through Core; it imports
// nothing of redlock.
package plain

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/internal/bugs"
	"quorumlock.dev/quorum"
	"quorumlock.dev/redlock/internal/push"
	"quorumlock.dev/redlock/internal/wait"
)

// Core is what the policy asks of the lock's core, for locks of type L.
type Core[L Lock] interface {
	wait.Core[L]
	// Probeable reports a master fit to be asked first: its last call
	// got a reply and its votes count.
	Probeable(i int) bool
	// SetNX is master i's call of a plain attempt on l.
	SetNX(ctx context.Context, i int, l L, ttl time.Duration) (bool, error)
	// Holders is who holds key on each master that refused round, each
	// read bounded by the node timeout (OK false: not read).
	Holders(ctx context.Context, round *quorum.Round, key string) []push.Holder
}

// Lock is what the policy needs of the core's lock: its token.
type Lock interface {
	comparable
	Token() string
}

//go:embed scripts/probe.lua
var probeLua string

// ProbeScript is the call to the master asked first (see probeAsk).
var ProbeScript = driver.NewScript(probeLua)

// errNotProbed is the call of a master that an attempt did not make
// because the master it asked first refused.
var errNotProbed = fmt.Errorf("%w: the master asked first refused", wait.ErrNotAsked)

// errNotAsked is the call of a master that an attempt did not make because
// the round ended while it waited for the master asked first.
var errNotAsked = fmt.Errorf("%w: the round ended while the master asked first had not answered", wait.ErrNotAsked)

// Policy is a Client without WithFairness.
type Policy[L Lock] struct{ c Core[L] }

// New is the plain policy of core c.
func New[L Lock](c Core[L]) Policy[L] { return Policy[L]{c} }

func (p Policy[L]) Join(_ context.Context, resource string, ttl time.Duration) (wait.Waiter[L], error) {
	return &waiter[L]{Base: wait.Base[L]{Config: p.c.WaitConfig(), Resource: resource, TTL: ttl, Rnd: p.c.Stream()}, c: p.c, keys: []string{"lock:" + resource}}, nil
}

func (Policy[L]) Unlock(context.Context, L, time.Time, time.Duration, error) (bool, func(), error) {
	return false, nil, nil
}

// waiter is one Lock call of the plain policy.
type waiter[L Lock] struct {
	wait.Base[L]
	c      Core[L]
	keys   []string     // the lock key
	w      *push.Waiter // nil until the first loss to a holder: an uncontended Lock pays nothing
	probed bool         // the last attempt asked the probe master first, and lost there
	late   bool         // the last attempt asked the others without the probe master's answer
	view   probeView    // what the probe master said of the holder then, when the waiter marked its log before
}

func (p *waiter[L]) Try(ctx context.Context) (L, *quorum.Round, error, bool) {
	c := p.c
	l := c.NewLock(p.Resource, wait.NewToken(p.Rnd))
	var a *probeAsk[L]
	if c.Masters() >= 3 && (p.w != nil || c.Hub().Subscribed(p.keys[0])) {
		// Waiting on a holder, with the other waiters its release
		// wakes, or a first attempt on a resource this client
		// waited for within the last second (a releaser taking its
		// next turn races the waiters its release woke): ask one
		// master first (see ProbeMaster). An uncontended Lock asks
		// every master at once.
		if i := ProbeMaster(c, p.Resource); i >= 0 {
			a = &probeAsk[L]{c: c, p: i, keys: p.keys, probed: make(chan struct{})}
		}
	}
	// A probe's refusal says who holds the key there; the wait uses it when
	// a release there since then cannot pass unseen (see plan).
	marked := p.w != nil && a != nil && p.w.ListeningAt(a.p)
	if p.w != nil {
		p.w.SetOwn(l.Token())
		if marked {
			p.w.Mark() // see plan: its releases from now on are logged
		}
	}
	var ask wait.Asker[L] // nil, not a nil *probeAsk: the round then asks SET NX
	if a != nil {
		ask = a
	}
	l, round, err := c.Attempt(ctx, l, p.TTL, ask)
	p.probed = round != nil && probeLost(round)
	p.late = a != nil && a.late.Load()
	p.view = probeView{}
	if p.probed && marked && a.holder.OK {
		// Read before the refusal's round ended: every other call of it
		// waited for the probe's.
		p.view = probeView{i: a.p, holder: a.holder, ok: true}
	}
	return l, round, err, true
}

func (p *waiter[L]) Sleep(ctx context.Context, round *quorum.Round, err error, held bool) error {
	wait := p.Poll()
	var wake <-chan struct{}
	if round != nil && held {
		if p.w == nil {
			p.w = p.c.Hub().Join(p.keys[0])
		}
		wait = p.plan(ctx, round, p.keys[0], wait)
		wake = p.w.Wake()
	}
	_, err = p.Rest(ctx, wait, wake, nil, p.probeJitter, p.probed, err)
	return err
}

func (p *waiter[L]) End(context.Context) {
	p.Stop()
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
func (p *waiter[L]) probeJitter() time.Duration {
	if p.c.Masters() < 3 {
		return 0
	}
	return wait.RandN(p.Rnd, probeWindow)
}

// probeWindow bounds probeJitter: several times the spread of a release's
// messages over the waiters of one master on a local network.
const probeWindow = 100 * time.Microsecond

// ProbeMaster is the master that attempts woken by a release ask first:
// the same for every client of resource (an FNV hash of its name), or the
// next one that is Probeable; -1: none is. Only the attempt that wins it
// asks the others, so that waiters woken by one release do not split the
// votes between them (docs/design.md, "Waiting for a held lock").
func ProbeMaster[L Lock](c Core[L], resource string) int {
	h := uint32(2166136261)
	for i := 0; i < len(resource); i++ {
		h = (h ^ uint32(resource[i])) * 16777619
	}
	n := c.Masters()
	for k := range n {
		i := (int(h%uint32(n)) + k) % n
		if c.Probeable(i) {
			return i
		}
	}
	return -1
}

// probeAsk is a probed attempt: it asks master p first and the others
// only if p agreed, or failed, or has not answered within probeWait: then
// it is a plain attempt on the rest. A round that went on without p's
// answer (late) may end with p's answer unknown: the wait that follows
// does not count on a release message from p (see plan).
type probeAsk[L Lock] struct {
	c      Core[L]
	p      int
	keys   []string      // the lock key
	probed chan struct{} // closed once the probe master answered, or probeWait passed; state says how
	state  atomic.Int32
	timer  *time.Timer // ends probeWait
	late   atomic.Bool // the others were asked without p's answer
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

// Prepare starts the wait for the probe master's answer: after probeWait
// the others are asked without it. The round lasts probeWait longer than
// a node timeout, so that the others, asked up to probeWait in, have a
// node timeout to answer: on a network whose round trip is over three
// quarters of the node timeout, a woken waiter's rounds failed on every
// master but the probe's, as an outage.
func (a *probeAsk[L]) Prepare(L, time.Duration) time.Duration {
	wait := probeWait(a.c.NodeTimeout())
	a.timer = time.AfterFunc(wait, func() {
		if !bugs.ProbeWaitsForever && a.state.CompareAndSwap(probeWaiting, probeGoOn) {
			a.late.Store(true)
			close(a.probed)
		}
	})
	return wait
}

// probeWait is how long a probed round waits for its probe master before
// it asks the others: a quarter of the node timeout, many times a
// healthy master's answer on a local network, and little of the vote's
// time for the others.
func probeWait(nodeTimeout time.Duration) time.Duration { return nodeTimeout / 4 }

func (a *probeAsk[L]) Ask(ctx context.Context, i int, l L, ttl time.Duration) (bool, error) {
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
		return a.c.SetNX(ctx, i, l, ttl)
	}
	set, err := wait.Call(a.c, ctx, i, func(ctx context.Context, m driver.Conn) (bool, error) {
		return a.probeCall(ctx, m, l.Token(), ttl.Milliseconds())
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

// Asked stops the wait for the probe master: the round is decided.
func (a *probeAsk[L]) Asked(L, *quorum.Round, time.Time, time.Duration) { a.timer.Stop() }

// Unasked: a probe master that never answered had the others wait for it,
// never asked, whatever the round recorded for them, unless they were
// asked without it (late).
func (a *probeAsk[L]) Unasked(round *quorum.Round, i int) bool {
	return !bugs.ProbeWaitsForever && i != a.p && !a.late.Load() && round.Answer(a.p) == quorum.Pending
}

// probeCall is the call to the probe master, m: SET NX, and on a refusal
// who holds the key there (probe.lua), kept for the wait that follows.
// The other calls of the round start after it returns: nothing else
// writes a.holder.
func (a *probeAsk[L]) probeCall(ctx context.Context, m driver.Conn, token string, ttlMS int64) (bool, error) {
	v, err := m.Eval(ctx, ProbeScript, a.keys, token, ttlMS)
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
			a.wrongType = !bugs.WrongTypeAtProbeRefuses
			return false, nil
		}
	case []any:
		if len(v) == 2 {
			if h := push.HolderOf(v[0], v[1]); h.OK {
				a.holder = h
				return false, nil
			}
		}
	}
	return false, fmt.Errorf("%w: %v (%T) from the probe script", driver.ErrUnexpectedReply, v, v)
}

// plan prepares the waiter's push.Waiter for the wait after the lost
// round: it returns how long to sleep (poll when nothing better is known).
// A message on its wake channel cuts the sleep short.
func (p *waiter[L]) plan(ctx context.Context, round *quorum.Round, key string, poll time.Duration) time.Duration {
	c, w := p.c, p.w
	// Any release until we know who holds the key wakes us; one that came
	// before this point is seen by the read below.
	w.Drain()
	w.SetHolder("")
	w.Expect(0)
	pushed := w.Listening(ctx, c.Quorum(), c.NodeTimeout())
	lost := probeLost(round)
	replies := p.holders(ctx, round, key, lost)
	free, known, holder := push.WakeAfter(round, replies, c.Quorum())
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
		w.Expect(releasesToWait(c.Masters(), c.Quorum(), round, replies, lost))
	}
	if !known {
		return poll
	}
	if free > 0 || !pushed {
		// Expiry follows the masters' clocks, not ours: a waiter that wakes
		// a little early finds the key there and reads its TTL again.
		free += wait.RandN(p.Rnd, wait.WakeJitter)
	}
	if !pushed || p.late {
		// No release reaches us, or the probe master's key is not known
		// (the round went on without its answer: the holder's release
		// may have to come from it, or never come): look again at the
		// poll interval. Counting such a master as the holder's, a waiter
		// once waited for a message that never came, until the key's
		// expiry (BenchmarkContended with 8 clients: ~25 s stalls).
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
func (p *waiter[L]) holders(ctx context.Context, round *quorum.Round, key string, lost bool) []push.Holder {
	view := p.view
	if !view.ok || !lost {
		return p.c.Holders(ctx, round, key)
	}
	replies := make([]push.Holder, p.c.Masters())
	replies[view.i] = view.holder
	if p.w.ReleasedAt(view.i, view.holder.Token) {
		replies[view.i] = push.Holder{PTTL: -2, OK: true}
	}
	return replies
}

// releasesToWait is how many of the holder's release messages a waiter
// waits for: once they have freed a majority of n masters (at its first
// message the next attempt would find its keys on the masters that have
// not released yet, and lose there). A master whose reply the round did
// not wait for may hold it too. After a loss at the probe master (lost),
// whose holder may hold nothing else (it lost the others and releases
// it), its release there is the one to wake for.
func releasesToWait(n, quorumN int, round *quorum.Round, replies []push.Holder, lost bool) int {
	held := n
	for i, r := range replies {
		if round.Answer(i) == quorum.Agreed || (r.OK && r.PTTL == -2) {
			held--
		}
	}
	if lost {
		held = 1
	}
	return max(held-(n-quorumN), 1)
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
