package redlock

import (
	"context"
	"time"

	"quorumlock.dev/driver"

	"quorumlock.dev/internal/clockdrift"
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
	// on the client's clock; clockOpen while one is under way, noRestart
	// when none (or without quarantine).
	out int64
}

func (c *Client) initClock(i int) {
	cs := &c.guard.masters[i].clock
	cs.off = c.cfg.clockInterval == 0
	cs.track = clockdrift.NewTracker(clockWindow, max(c.cfg.driftConstant, minStep))
}

// sampleClock reads master i's TIME under a node-timeout context, and
// takes it as a sample at the middle of the round trip, on the clock that
// counts suspend (so that a suspended client does not see the masters'
// clocks jump).
func (c *Client) sampleClock(ctx context.Context, i int) {
	m := &c.guard.masters[i]
	m.mu.Lock()
	off := m.clock.off
	m.mu.Unlock()
	if off {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, c.cfg.nodeTimeout)
	_, sent := c.clock.now()
	serverTime, err := c.masters[i].(driver.Inspector).Time(cctx)
	_, got := c.clock.now()
	cancel()
	now := c.nanos()
	if ctx.Err() != nil || (err != nil && !refused(err)) {
		return // no reply: a later sample decides
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c.guard.stopped.Load() {
		return // Close has reset what the guard knew
	}
	if err != nil {
		m.clock.off = true
		m.clock.out = noRestart
		m.publish()
		c.cfg.logger.Warn("redlock: the clock monitor cannot read TIME; this master's clock is not watched", "master", c.addrs[i], "err", err)
		c.reviewLocked(i, now)
		return
	}
	c.observeClock(i, clockdrift.Sample{Local: sent + (got-sent)/2, Remote: serverTime, RTT: got - sent}, now)
}

// observeClock takes master i's next sample: it logs and tells the
// hooks what the sample showed, and with quarantine keeps the master
// out while its clock is unsafe for our leases: a step forward not yet
// told apart (a jump, or a change of rate not yet measured), or a rate
// beyond the drift factor with the master the faster. A slow master or a
// step back only make its keys live longer. The caller holds the master's
// mu.
func (c *Client) observeClock(i int, s clockdrift.Sample, now int64) {
	g := c.guard
	m := &g.masters[i]
	cs := &m.clock
	addr, factor := c.addrs[i], c.cfg.driftFactor
	h := &c.cfg.hooks
	r := cs.track.Add(s)
	cs.samples++
	unsafe := false
	if r.Step != 0 {
		cs.stepFwd = r.Step > 0
		unsafe = cs.stepFwd
		c.cfg.logger.Warn("redlock: master's clock stepped between two samples (a jump or a change of rate)",
			"master", addr, "by", r.Step, "quarantined", unsafe && c.cfg.clockQuarantine)
	}
	if r.Jumped && h.MasterClockJumped != nil {
		h.MasterClockJumped(addr, r.Jump.By)
	}
	if r.Settling {
		unsafe = cs.stepFwd
	}
	if r.RateOK {
		cs.rate = r.Rate
		if h.MasterDrift != nil {
			h.MasterDrift(addr, 1+r.Rate)
		}
		switch {
		case !cs.drifting && clockdrift.Beyond(r.Rate, r.RateErr, factor):
			cs.drifting = true
			c.cfg.logger.Warn("redlock: master's clock rate is beyond the drift allowance",
				"master", addr, "rate", 1+r.Rate, "drift_factor", factor, "quarantined", r.Rate > 0 && c.cfg.clockQuarantine)
		case cs.drifting && !clockdrift.Exceeds(r.Rate, factor):
			cs.drifting = false
			c.cfg.logger.Info("redlock: master's clock rate is within the drift allowance again", "master", addr, "rate", 1+r.Rate)
		}
	}
	unsafe = unsafe || (cs.drifting && cs.rate > 0)
	if !c.cfg.clockQuarantine {
		return
	}
	switch {
	case unsafe:
		cs.out = clockOpen
	case cs.out == clockOpen:
		cs.out = now
	}
	m.publish()
	c.reviewLocked(i, now)
}
