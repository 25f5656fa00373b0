package redlock

import (
	"errors"
	"time"

	"quorumlock.dev/redlock/internal/watch"
)

// errQuarantined is the error of a master whose vote was not counted (see
// [WithRestartGuard] and [WithClockMonitor]).
var errQuarantined = errors.New("redlock: vote not counted: the master restarted less than the longest TTL ago")

// startWatcher starts the watcher of the restart guard and the clock
// monitor; Close stops it.
func (c *Client) startWatcher() *watch.Watcher {
	h := &c.cfg.hooks
	return watch.Start(watch.Config{
		Masters:         c.masters,
		Labels:          c.addrs,
		Interval:        c.cfg.guardInterval,
		RestartGuard:    c.cfg.restartInterval > 0,
		ClockMonitor:    c.cfg.clockInterval > 0,
		ClockQuarantine: c.cfg.clockQuarantine,
		NodeTimeout:     c.cfg.nodeTimeout,
		DriftFactor:     c.cfg.driftFactor,
		DriftConstant:   c.cfg.driftConstant,
		// c.clock, read at each call: a test may set it after New.
		Boot:        func() time.Duration { _, boot := c.clock.now(); return boot },
		Logger:      c.cfg.logger,
		Quarantined: h.MasterQuarantined,
		Restored:    h.MasterRestored,
		Drift:       h.MasterDrift,
		Jumped:      h.MasterClockJumped,
	})
}
