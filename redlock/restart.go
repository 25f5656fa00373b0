package redlock

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"quorumlock.dev/driver"

	"quorumlock.dev/internal/clockdrift"
	"quorumlock.dev/redlock/internal/push"
)

// errQuarantined is the error of a master whose vote the restart guard did
// not count (see [WithRestartGuard]).
var errQuarantined = errors.New("redlock: vote not counted: the master restarted less than the longest TTL ago")

// noRestart is a restart time so far back that no TTL reaches it.
const noRestart = math.MinInt64 / 4

// clockOpen is the end of a clock episode still under way: so far ahead
// that every master it marks is quarantined.
const clockOpen = math.MaxInt64 / 4

// restartGuard is the background watcher of [WithRestartGuard] and
// [WithClockMonitor] and the state the acquire path reads: one atomic per
// master and one for the longest hold, nothing else.
type restartGuard struct {
	interval time.Duration
	maxHold  atomic.Int64 // ns: the longest TTL issued, plus its drift allowance
	masters  []guarded
	kick     chan struct{} // cap 1: sample now (a master came back)
	cancel   context.CancelFunc
	loop     sync.WaitGroup // the watch loop
	samples  sync.WaitGroup // samples in flight, at most one per master
	stopped  atomic.Bool    // by Close: no sample counts, no suspicion is raised
}

// guarded is what the guard knows of one master.
type guarded struct {
	// restarted is when the master's quarantine began, in ns on the
	// client's clock: the later of restartAt and clock.out (see publish);
	// noRestart when none.
	restarted atomic.Int64
	sampling  atomic.Bool // a sample is in flight: a hung master gets one at a time

	mu          sync.Mutex
	gen         uint64 // suspicions raised (see suspect)
	sampledGen  uint64 // gen when the last sample that counted was sent
	runID       string // "" until a sample got one
	start       int64  // the latest this runID can have started, ns: the least of its samples' bounds
	off         bool   // INFO refused, unreadable or not asked for: never quarantined for a restart
	restartAt   int64  // the latest restart known or suspected, ns; noRestart when none
	clock       clockState
	quarantined bool  // as last reported
	until       int64 // the until last reported, ns
}

// publish stores the quarantine's start for the acquire path. The caller
// holds m.mu.
func (m *guarded) publish() {
	m.restarted.Store(max(m.restartAt, m.clock.out))
}

func newRestartGuard(interval time.Duration, n int) *restartGuard {
	g := &restartGuard{interval: interval, masters: make([]guarded, n), kick: make(chan struct{}, 1)}
	for i := range g.masters {
		m := &g.masters[i]
		m.restartAt, m.clock.out = noRestart, noRestart
		m.publish()
	}
	return g
}

// issued records a TTL handed to the masters. Cheap when it is not a new
// maximum: one load.
func (c *Client) issued(ttl time.Duration) {
	g := c.guard
	if g == nil {
		return
	}
	hold := int64(ttl + clockdrift.Allowance(ttl, c.cfg.driftFactor, c.cfg.driftConstant))
	for {
		cur := g.maxHold.Load()
		if hold <= cur || g.maxHold.CompareAndSwap(cur, hold) {
			return
		}
	}
}

// quarantined reports whether master i's vote must not count: it
// restarted (or may have) less than the longest hold ago.
func (c *Client) quarantined(i int) bool {
	g := c.guard
	if g == nil {
		return false
	}
	return c.nanos()-g.masters[i].restarted.Load() < g.maxHold.Load()
}

// suspect is called when master i replied after calls to it had failed: it
// may have restarted, and its vote must not count before a sample says
// when it started. A sample sent before this one cannot clear it.
func (c *Client) suspect(i int) {
	g := c.guard
	m := &g.masters[i]
	m.mu.Lock()
	if !m.off && !g.stopped.Load() {
		m.gen++
		m.restartAt = c.nanos()
		m.publish()
	}
	m.mu.Unlock()
	push.Signal(g.kick)
}

// startGuard starts the watcher; Close stops it.
func (c *Client) startGuard() {
	g := c.guard
	for i, m := range c.masters {
		gm := &g.masters[i]
		gm.off = c.cfg.restartInterval == 0
		c.initClock(i)
		// INFO and TIME of a cluster reach one node of several, a
		// different one each time: its run_id would flap, its clock seem
		// to jump.
		why := ""
		if _, ok := m.(driver.Inspector); !ok {
			why = "its driver cannot read INFO or TIME"
		} else if driver.Describe(m).Cluster != nil {
			why = "it is a cluster"
		}
		if why != "" {
			if !gm.off {
				c.cfg.logger.Warn("redlock: the restart guard does not watch this master ("+why+"); it is never quarantined", "master", c.addrs[i])
			}
			if !gm.clock.off {
				c.cfg.logger.Warn("redlock: the clock monitor does not watch this master ("+why+")", "master", c.addrs[i])
			}
			gm.off, gm.clock.off = true, true
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	g.loop.Go(func() { c.watch(ctx) })
}

// stopGuard stops the watcher and waits, at most until by, for its
// samples in flight: go-redis may not give up a read of a master that
// hangs before its ReadTimeout (never, with -1). Such a sample ends later,
// in the background, and changes nothing. Then every master counts.
// Idempotent.
func (c *Client) stopGuard(by time.Time) {
	g := c.guard
	if g == nil {
		return
	}
	g.stopped.Store(true)
	g.cancel()
	g.loop.Wait()
	push.WaitBy(&g.samples, by)
	for i := range g.masters {
		m := &g.masters[i]
		m.mu.Lock()
		m.restartAt, m.clock.out = noRestart, noRestart
		m.publish()
		m.mu.Unlock()
	}
}

func (c *Client) watch(ctx context.Context) {
	g := c.guard
	t := time.NewTicker(g.interval)
	defer t.Stop()
	for {
		for i := range g.masters {
			c.review(i)
			if g.masters[i].sampling.CompareAndSwap(false, true) {
				g.samples.Go(func() {
					defer g.masters[i].sampling.Store(false)
					c.sampleClock(ctx, i)
					c.sample(ctx, i)
				})
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-g.kick:
		}
	}
}

// sample reads master i's run_id and uptime, bounded by the node timeout,
// and moves its restart time to what the master says. A master that does
// not answer keeps what was known: a later sample decides.
func (c *Client) sample(ctx context.Context, i int) {
	m := &c.guard.masters[i]
	m.mu.Lock()
	gen, off := m.gen, m.off
	m.mu.Unlock()
	if off {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, c.cfg.nodeTimeout)
	info, err := c.masters[i].(driver.Inspector).Info(cctx, "server")
	cancel()
	// The reply came before now: the master started at most uptime before it.
	now := c.nanos()
	if ctx.Err() != nil {
		return
	}
	runID, uptime, ok := "", time.Duration(0), false
	if err == nil {
		runID, uptime, ok = parseServerInfo(info)
	}
	if err != nil && !refused(err) {
		// No reply, or a passing error (LOADING, BUSY): a later sample decides.
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c.guard.stopped.Load() {
		return // Close has reset what the guard knew
	}
	if !ok {
		// Managed Redis often disables INFO: without it there is nothing
		// to watch, and quarantining for ever would cost the master.
		m.off = true
		m.restartAt = noRestart
		m.publish()
		c.cfg.logger.Warn("redlock: the restart guard cannot read INFO server; this master is never quarantined", "master", c.addrs[i], "err", err)
		return
	}
	if m.runID != "" && runID != m.runID {
		c.cfg.logger.Warn("redlock: master restarted", "master", c.addrs[i], "run_id", runID, "was", m.runID, "uptime", uptime)
	}
	// Redis counts uptime as the difference of two wall-clock seconds: it
	// can read 1 a moment after the start. So the start is at most a second
	// later than uptime says; every sample bounds it, and the least bound
	// holds for the run_id.
	start := now - int64(uptime) + int64(time.Second)
	if runID == m.runID {
		start = min(start, m.start)
	}
	m.runID, m.start = runID, start
	if m.gen != gen {
		// A suspicion came after this sample was sent: sample again.
		push.Signal(c.guard.kick)
		return
	}
	m.restartAt = start
	m.publish()
	m.sampledGen = gen
	c.reviewLocked(i, now)
}

// refused reports an error reply that says INFO will never be answered:
// not permitted (ACL) or not known (renamed away).
func refused(err error) bool {
	if !driver.IsReplyError(err) {
		return false
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "NOPERM") || strings.Contains(msg, "unknown command")
}

// review reports master i's change of state, if any.
func (c *Client) review(i int) {
	m := &c.guard.masters[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	c.reviewLocked(i, c.nanos())
}

// reviewLocked logs and tells the hooks when master i goes out or comes
// back. A suspicion that no sample has settled yet is not reported: most
// are a network blip that the next sample clears. A clock episode under
// way is reported as ending a hold from now, and again when it ends; the
// clock monitor logs its own causes.
func (c *Client) reviewLocked(i int, now int64) {
	g := c.guard
	m := &g.masters[i]
	if m.gen != m.sampledGen {
		return
	}
	hold := g.maxHold.Load()
	open := m.clock.out == clockOpen
	until := now + hold
	if !open {
		until = m.restarted.Load() + hold
	}
	out := open || now < until
	h := &c.cfg.hooks
	switch {
	case out && (!m.quarantined || (!open && until > m.until)):
		at := time.Now().Add(time.Duration(until - now))
		if !m.quarantined && m.restartAt > m.clock.out {
			c.cfg.logger.Warn("redlock: master restarted less than the longest TTL ago; its votes do not count toward a quorum until then",
				"master", c.addrs[i], "until", at, "ttl", time.Duration(hold))
		}
		m.quarantined, m.until = true, until
		if h.MasterQuarantined != nil {
			h.MasterQuarantined(c.addrs[i], at)
		}
	case !out && m.quarantined:
		m.quarantined = false
		c.cfg.logger.Info("redlock: master counts toward a quorum again", "master", c.addrs[i])
		if h.MasterRestored != nil {
			h.MasterRestored(c.addrs[i])
		}
	}
}

// parseServerInfo reads run_id and uptime_in_seconds from INFO server's
// reply.
func parseServerInfo(s string) (runID string, uptime time.Duration, ok bool) {
	var haveUp bool
	for line := range strings.Lines(s) {
		k, v, found := strings.Cut(strings.TrimRight(line, "\r\n"), ":")
		if !found {
			continue
		}
		switch k {
		case "run_id":
			runID = v
		case "uptime_in_seconds":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return "", 0, false
			}
			uptime, haveUp = time.Duration(min(n, 1<<32))*time.Second, true
		}
	}
	return runID, uptime, runID != "" && haveUp
}
