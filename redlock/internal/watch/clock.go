package watch

import (
	"context"
	"time"

	"quorumlock.dev/driver"

	"quorumlock.dev/clockdrift"
)

const (
	// clockWindow is how many readings of a master's TIME the rate is
	// estimated over (fewer after a step: only those since).
	clockWindow = 32
	// minStep is the least step seen: TIME reads microseconds, and the
	// reading of a healthy master moves by a few of them.
	minStep = time.Millisecond
)

// clockState is what the monitor knows of one master's clock. Guarded by
// the master's mu.
type clockState struct {
	off      bool // not watched: TIME refused, a cluster master, or no monitor
	track    *clockdrift.Tracker
	stepFwd  bool    // the last step was forward
	drifting bool    // the rate is beyond the drift factor (warned; until it is within again)
	rate     float64 // the last estimate, as clockdrift.Rate
	samples  int     // taken so far
	// out is when the latest episode that quarantines the master ended, ns
	// on the watcher's clock; clockOpen while one is under way, noRestart
	// when none (or without quarantine).
	out int64
}

// sampleClock reads master i's TIME under a node-timeout context, and
// takes it as a sample at the middle of the round trip, on the clock that
// counts suspend (so that a suspended client does not see the masters'
// clocks jump).
func (w *Watcher) sampleClock(ctx context.Context, i int) {
	m := &w.masters[i]
	m.mu.Lock()
	off := m.clock.off
	m.mu.Unlock()
	if off {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, w.cfg.NodeTimeout)
	sent := w.cfg.Boot()
	serverTime, err := w.cfg.Masters[i].(driver.Inspector).Time(cctx)
	got := w.cfg.Boot()
	cancel()
	now := w.nanos()
	if ctx.Err() != nil || (err != nil && !refused(err)) {
		return // no reply: a later sample decides
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if w.stopped.Load() {
		return // Close has reset what the watcher knew
	}
	if err != nil {
		m.clock.off = true
		m.clock.out = noRestart
		m.publish()
		w.cfg.Logger.Warn("redlock: the clock monitor cannot read TIME; this master's clock is not watched", "master", w.cfg.Labels[i], "err", err)
		w.reviewLocked(i, now)
		return
	}
	w.observeClock(i, clockdrift.Sample{Local: sent + (got-sent)/2, Remote: serverTime, RTT: got - sent}, now)
}

// observeClock takes master i's next sample: it logs and tells the
// hooks what the sample showed, and with quarantine keeps the master
// out while its clock is unsafe for our leases: a step forward not yet
// told apart (a jump, or a change of rate not yet measured), or a rate
// beyond the drift factor with the master the faster. A slow master or a
// step back only make its keys live longer. The caller holds the master's
// mu.
func (w *Watcher) observeClock(i int, s clockdrift.Sample, now int64) {
	m := &w.masters[i]
	cs := &m.clock
	addr, factor, quarantine := w.cfg.Labels[i], w.cfg.DriftFactor, w.cfg.ClockQuarantine
	r := cs.track.Add(s)
	cs.samples++
	unsafe := false
	if r.Step != 0 {
		cs.stepFwd = r.Step > 0
		unsafe = cs.stepFwd
		w.cfg.Logger.Warn("redlock: master's clock stepped between two samples (a jump or a change of rate)",
			"master", addr, "by", r.Step, "quarantined", unsafe && quarantine)
	}
	if r.Jumped && w.cfg.Jumped != nil {
		w.cfg.Jumped(addr, r.Jump.By)
	}
	if r.Settling {
		unsafe = cs.stepFwd
	}
	if r.RateOK {
		cs.rate = r.Rate
		if w.cfg.Drift != nil {
			w.cfg.Drift(addr, 1+r.Rate)
		}
		switch {
		case !cs.drifting && clockdrift.Beyond(r.Rate, r.RateErr, factor):
			cs.drifting = true
			w.cfg.Logger.Warn("redlock: master's clock rate is beyond the drift allowance",
				"master", addr, "rate", 1+r.Rate, "drift_factor", factor, "quarantined", r.Rate > 0 && quarantine)
		case cs.drifting && !clockdrift.Exceeds(r.Rate, factor):
			cs.drifting = false
			w.cfg.Logger.Info("redlock: master's clock rate is within the drift allowance again", "master", addr, "rate", 1+r.Rate)
		}
	}
	unsafe = unsafe || (cs.drifting && cs.rate > 0)
	if !quarantine {
		return
	}
	switch {
	case unsafe:
		cs.out = clockOpen
	case cs.out == clockOpen:
		cs.out = now
	}
	m.publish()
	w.reviewLocked(i, now)
}
