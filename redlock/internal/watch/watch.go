// Package watch is the watcher of a redlock Client's masters: the restart
// guard samples INFO server, the clock monitor TIME, and a master that
// restarted, or whose clock stepped forward or runs fast, is quarantined
// for the longest hold issued. It counts no votes: redlock asks it. A
// [Watcher] runs one loop and at most one sample per master until Close.
package watch

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/internal/bounded"

	"quorumlock.dev/clockdrift"
)

// noRestart is a restart time so far back that no TTL reaches it.
const noRestart = math.MinInt64 / 4

// clockOpen is the end of a clock episode still under way: so far ahead
// that every master it marks is quarantined.
const clockOpen = math.MaxInt64 / 4

// Config is what a [Watcher] watches, how, and whom it tells. The four
// funcs are the client's hooks, each optional; they are called from the
// watcher's goroutines with the master's label.
type Config struct {
	Masters      []driver.Conn
	Labels       []string      // each master's name in logs and hooks
	Interval     time.Duration // between two samples of a master
	RestartGuard bool          // sample INFO server
	ClockMonitor bool          // sample TIME
	// ClockQuarantine keeps a master out while its clock is unsafe.
	ClockQuarantine bool
	NodeTimeout     time.Duration // bounds each sample
	// The lease's drift allowance: a hold is a TTL and its allowance, and a
	// clock whose rate strays beyond DriftFactor is warned of.
	DriftFactor   float64
	DriftConstant time.Duration
	// Boot reads the clock that counts time the machine spent suspended;
	// nil: the monotonic clock.
	Boot   func() time.Duration
	Logger *slog.Logger

	Quarantined func(addr string, until time.Time)
	Restored    func(addr string)
	Drift       func(addr string, rate float64)
	Jumped      func(addr string, by time.Duration)
}

// Watcher is the background watcher and the state the acquire path reads:
// one atomic per master and one for the longest hold, nothing else. The
// methods of a nil Watcher do nothing and quarantine no master.
type Watcher struct {
	cfg     Config
	epoch   time.Time    // origin of the ns times below
	maxHold atomic.Int64 // ns: the longest TTL issued, plus its drift allowance
	masters []master
	kick    chan struct{} // cap 1: sample now (a master came back)
	cancel  context.CancelFunc
	loop    sync.WaitGroup // the watch loop
	samples sync.WaitGroup // samples in flight, at most one per master
	stopped atomic.Bool    // by Close: no sample counts, no suspicion is raised
}

// master is what the watcher knows of one master.
type master struct {
	// restarted is when the master's quarantine began, in ns on the
	// watcher's clock: the later of restartAt and clock.out (see publish);
	// noRestart when none.
	restarted atomic.Int64
	sampling  atomic.Bool // a sample is in flight: a hung master gets one at a time

	mu          sync.Mutex
	gen         uint64 // suspicions raised (see Suspect)
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
func (m *master) publish() {
	m.restarted.Store(max(m.restartAt, m.clock.out))
}

// Start starts watching cfg.Masters: the first samples are sent at once.
// A master whose driver cannot read INFO or TIME, or that is a cluster, is
// not watched (logged at Warn). [Watcher.Close] stops it.
func Start(cfg Config) *Watcher {
	w := &Watcher{cfg: cfg, epoch: time.Now(), masters: make([]master, len(cfg.Masters)), kick: make(chan struct{}, 1)}
	if w.cfg.Boot == nil {
		w.cfg.Boot = func() time.Duration { return time.Since(w.epoch) }
	}
	for i, conn := range cfg.Masters {
		m := &w.masters[i]
		m.restartAt, m.clock.out = noRestart, noRestart
		m.publish()
		m.off = !cfg.RestartGuard
		m.clock.off = !cfg.ClockMonitor
		m.clock.track = clockdrift.NewTracker(clockWindow, max(cfg.DriftConstant, minStep))
		// INFO and TIME of a cluster reach one node of several, a
		// different one each time: its run_id would flap, its clock seem
		// to jump.
		why := ""
		if _, ok := conn.(driver.Inspector); !ok {
			why = "its driver cannot read INFO or TIME"
		} else if driver.Describe(conn).Cluster != nil {
			why = "it is a cluster"
		}
		if why != "" {
			if !m.off {
				cfg.Logger.Warn("redlock: the restart guard does not watch this master ("+why+"); it is never quarantined", "master", cfg.Labels[i])
			}
			if !m.clock.off {
				cfg.Logger.Warn("redlock: the clock monitor does not watch this master ("+why+")", "master", cfg.Labels[i])
			}
			m.off, m.clock.off = true, true
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	w.loop.Go(func() { w.run(ctx) })
	return w
}

// nanos is the watcher's clock: ns since Start, monotonic.
func (w *Watcher) nanos() int64 { return int64(time.Since(w.epoch)) }

// Issued records a TTL handed to the masters. Cheap when it is not a new
// maximum: one load.
func (w *Watcher) Issued(ttl time.Duration) {
	if w == nil {
		return
	}
	hold := int64(ttl + clockdrift.Allowance(ttl, w.cfg.DriftFactor, w.cfg.DriftConstant))
	for {
		cur := w.maxHold.Load()
		if hold <= cur || w.maxHold.CompareAndSwap(cur, hold) {
			return
		}
	}
}

// Quarantined reports whether master i's vote must not count: it
// restarted (or may have), or its clock was unsafe, less than the longest
// hold ago.
func (w *Watcher) Quarantined(i int) bool {
	if w == nil {
		return false
	}
	return w.nanos()-w.masters[i].restarted.Load() < w.maxHold.Load()
}

// Suspect is called when master i replied after calls to it had failed: it
// may have restarted, and its vote must not count before a sample says
// when it started. A sample sent before this one cannot clear it.
func (w *Watcher) Suspect(i int) {
	if w == nil {
		return
	}
	m := &w.masters[i]
	m.mu.Lock()
	if !m.off && !w.stopped.Load() {
		m.gen++
		m.restartAt = w.nanos()
		m.publish()
	}
	m.mu.Unlock()
	w.wake()
}

// Close stops the loop and waits, at most until by, for its samples in
// flight: go-redis may not give up a read of a master that hangs before
// its ReadTimeout (never, with -1). Such a sample ends later, in the
// background, and changes nothing. Then every master counts. Idempotent.
func (w *Watcher) Close(by time.Time) {
	if w == nil {
		return
	}
	w.stopped.Store(true)
	w.cancel()
	w.loop.Wait()
	bounded.Wait(&w.samples, by)
	for i := range w.masters {
		m := &w.masters[i]
		m.mu.Lock()
		m.restartAt, m.clock.out = noRestart, noRestart
		m.publish()
		m.mu.Unlock()
	}
}

// Progress is what the watcher has read of one master so far, for tests
// that wait on it.
type Progress struct {
	RunID    string // of the last INFO sample that counted; "" before one
	Clock    int    // TIME samples taken
	Sampling bool   // a sample is in flight
}

// Progress reports what the watcher has read of master i.
func (w *Watcher) Progress(i int) Progress {
	m := &w.masters[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	return Progress{RunID: m.runID, Clock: m.clock.samples, Sampling: m.sampling.Load()}
}

func (w *Watcher) run(ctx context.Context) {
	t := time.NewTicker(w.cfg.Interval)
	defer t.Stop()
	for {
		for i := range w.masters {
			w.review(i)
			if w.masters[i].sampling.CompareAndSwap(false, true) {
				w.samples.Go(func() {
					defer w.masters[i].sampling.Store(false)
					w.sampleClock(ctx, i)
					w.sample(ctx, i)
				})
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.kick:
		}
	}
}

// wake makes the loop sample every master now, unless it is already told to.
func (w *Watcher) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// review reports master i's change of state, if any.
func (w *Watcher) review(i int) {
	m := &w.masters[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	w.reviewLocked(i, w.nanos())
}

// reviewLocked logs and tells the hooks when master i goes out or comes
// back. A suspicion that no sample has settled yet is not reported: most
// are a network blip that the next sample clears. A clock episode under
// way is reported as ending a hold from now, and again when it ends; the
// clock monitor logs its own causes.
func (w *Watcher) reviewLocked(i int, now int64) {
	m := &w.masters[i]
	if m.gen != m.sampledGen {
		return
	}
	hold := w.maxHold.Load()
	open := m.clock.out == clockOpen
	until := now + hold
	if !open {
		until = m.restarted.Load() + hold
	}
	out := open || now < until
	addr := w.cfg.Labels[i]
	switch {
	case out && (!m.quarantined || (!open && until > m.until)):
		at := time.Now().Add(time.Duration(until - now))
		if !m.quarantined && m.restartAt > m.clock.out {
			w.cfg.Logger.Warn("redlock: master restarted less than the longest TTL ago; its votes do not count toward a quorum until then",
				"master", addr, "until", at, "ttl", time.Duration(hold))
		}
		m.quarantined, m.until = true, until
		if w.cfg.Quarantined != nil {
			w.cfg.Quarantined(addr, at)
		}
	case !out && m.quarantined:
		m.quarantined = false
		w.cfg.Logger.Info("redlock: master counts toward a quorum again", "master", addr)
		if w.cfg.Restored != nil {
			w.cfg.Restored(addr)
		}
	}
}
