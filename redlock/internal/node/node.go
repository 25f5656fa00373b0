// Package node is what the lock knows of one master's responsiveness:
// the breaker that stops piling calls up behind a master that hangs, and
// stops spending calls on one that is down. It makes no call itself; the
// caller tells it when a call starts and how it ended, on a clock of the
// caller's (ns), so that its states are tested on a clock the test moves.
package node

import (
	"sync"
	"sync/atomic"
)

// Breaker is one master's breaker. A master is out when it has not
// replied for longer than OutAfter node timeouts and either calls to it
// have been in flight all that time (it hangs) or every call that returned
// in that time failed without a reply (it is down). Time it spent idle
// does not count. A round then does not call it but counts it as failed at
// once, except for a probe: one at a time, at most one per node timeout
// (the calls that come at the very instant of a probe, by the caller's
// clock, probe with it: which of two rounds begun at one instant probes
// does not then depend on which goroutine ran first, and a simulated
// schedule replays its trace). A call that comes while a probe is in
// flight may wait for its end (see Enter): a client idle through an outage
// finds its masters out when it calls again, and the second of two calls
// made just then must not fail for masters that answer the first. The
// first reply (to the probe or to a call that was stuck) closes the
// breaker. Whether out or not, a call to a hung
// master holds a goroutine for at most the node timeout, except those that
// got a pooled connection: they wait in a read until go-redis's
// ReadTimeout, at most PoolSize of them. So what a hung master holds is at
// most its pool plus the calls of one node timeout, and once it is out, one
// probe instead of those calls. The zero value is a master that has not
// been called.
type Breaker struct {
	inflight   atomic.Int64
	busySince  atomic.Int64 // when inflight last rose from 0, in ns
	lastReply  atomic.Int64 // when the master last replied, in ns
	failedLast atomic.Bool  // the last call that returned got no reply
	failing    atomic.Int64 // when the calls began to fail without a reply
	probeMu    sync.Mutex
	lastProbe  int64         // when the last probe started; probeMu guards it and the fields below
	prevProbe  int64         // lastProbe before the probes in flight
	probes     int           // probes in flight
	probeTold  bool          // a probe in flight has returned with the master's outcome
	probeEnd   chan struct{} // closed when the probes in flight end; nil: none
}

// OutAfter is how many node timeouts without a reply take a master out.
// More than one, so that a master that is only overloaded, answering late
// but answering, is not taken out and put back over and over.
const OutAfter = 4

// Enter is called before a call to the master at now (ns), with the node
// timeout in ns; it returns false when the call must not be made. A true
// probe must be passed to Exit or Abstain. When the call must not be made
// because a probe is in flight, probing is closed when that probe ends:
// the caller may wait for it and Enter again (the probe's reply closes the
// breaker), so that a call that comes just after the probe is not failed
// for a master that answers.
func (h *Breaker) Enter(now, timeout int64) (ok, probe bool, probing <-chan struct{}) {
	n := h.inflight.Load()
	quiet := OutAfter * timeout
	hangs := n > 0 && now-h.busySince.Load() > quiet
	down := h.failedLast.Load() && now-h.failing.Load() > quiet
	if now-h.lastReply.Load() > quiet && (hangs || down) {
		h.probeMu.Lock()
		ok := h.probes == 0 && now-h.lastProbe >= timeout || h.probes > 0 && now == h.lastProbe
		if ok {
			if h.probes == 0 {
				h.probeEnd = make(chan struct{})
				h.prevProbe, h.probeTold = h.lastProbe, false
			}
			h.probes++
			h.lastProbe = now
		}
		probing := h.probeEnd
		h.probeMu.Unlock()
		if !ok {
			return false, false, probing
		}
		probe = true
	}
	if n == 0 {
		// Before the increment, so that nobody sees calls in flight with
		// the start of an earlier busy spell.
		h.busySince.Store(now)
	}
	h.inflight.Add(1)
	return true, probe, nil
}

// Exit is called when the call returns; replied says whether the master
// itself answered (a reply or an error reply, not a network error or a
// timeout). back reports the first reply after calls that got none: the
// master may have restarted in between.
func (h *Breaker) Exit(now int64, probe, replied bool) (back bool) {
	if replied {
		h.lastReply.Store(now)
		back = h.failedLast.Swap(false)
	} else if !h.failedLast.Swap(true) {
		h.failing.Store(now)
	}
	h.inflight.Add(-1)
	if probe {
		h.probeDone(true)
	}
	return back
}

// probeDone ends a probe; told says whether it returned with the master's
// outcome. Probes that all ended telling nothing do not count as one: the
// next call may probe at once.
func (h *Breaker) probeDone(told bool) {
	h.probeMu.Lock()
	h.probes--
	h.probeTold = h.probeTold || told
	if h.probes == 0 {
		if !h.probeTold {
			h.lastProbe = h.prevProbe
		}
		close(h.probeEnd)
		h.probeEnd = nil
	}
	h.probeMu.Unlock()
}

// Abstain is Exit for a call that tells nothing of the master: the
// caller's context ended it. A probe that abstains leaves the next probe
// to the next call (a caller's deadline must not hold the master out).
func (h *Breaker) Abstain(probe bool) {
	h.inflight.Add(-1)
	if probe {
		h.probeDone(false)
	}
}

// FailedLast reports whether the last call that returned got no reply.
func (h *Breaker) FailedLast() bool { return h.failedLast.Load() }

// LastReply is when the master last replied (ns; 0: never).
func (h *Breaker) LastReply() int64 { return h.lastReply.Load() }

// Inflight is how many calls to the master are in flight.
func (h *Breaker) Inflight() int64 { return h.inflight.Load() }
