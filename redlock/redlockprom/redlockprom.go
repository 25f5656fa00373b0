// Package redlockprom exports what a [redlock.Client] and the fence guards
// do as Prometheus metrics. A [Metrics] gives the client's hooks
// (redlock.WithHooks(m.Hooks())), the guards' OnReject hook and a
// [prometheus.Collector] to register. It lives apart from redlock so that
// only programs that use it link the Prometheus client. No label carries a
// resource name: the series grow with the masters, never with the locks.
// docs/operations.md, "Metrics and alerts", says what each metric means.
package redlockprom

import (
	"context"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"quorumlock.dev/redlock"
	"quorumlock.dev/redlock/check"
)

// Label values of the series: the outcomes the hooks of redlock.Hooks are
// told, a fixed set each (a word not listed counts as the last one).
var (
	attemptOutcomes = [...]string{"acquired", "not_acquired", "quorum_unavailable", "fence_unavailable", "unsafe_config", "cancelled", "error"}
	extendOutcomes  = [...]string{"extended", "not_held", "quorum_unavailable", "cancelled", "error"}
	holdOutcomes    = [...]string{"unlocked", "lease_ran_out", "no_progress", "max_hold", "extend_failed"}
	renewalReasons  = [...]string{"no_progress", "max_hold", "lease_ran_out", "extend_failed"}
	votes           = [...]string{"agreed", "refused", "failed", "timeout", "quarantined", "skipped"}
)

// index is the place of word among words, the last one's when it is not
// there: a new outcome of a later redlock counts, and adds no series.
func index(words []string, word string) int {
	for i, w := range words {
		if w == word {
			return i
		}
	}
	return len(words) - 1
}

// Buckets of the histograms, in seconds.
var (
	// From a loopback round trip to past any sensible node timeout.
	latencyBuckets = prometheus.ExponentialBuckets(0.0001, 2, 15) // 100 µs .. 1.6 s
	// From a lease nearly spent to long leases.
	validityBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
	// From an uncontended call to a wait of a minute behind other holders.
	waitBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	// From a lock released at once to a job held for an hour and more.
	holdBuckets = prometheus.ExponentialBuckets(0.001, 4, 12) // 1 ms .. 70 min
)

// Metrics counts a client's acquisitions, votes, holds, extensions,
// renewal failures, waiters, quarantines and clock drift, and the writes its
// guards refuse. One Metrics may serve several clients; it is safe for concurrent
// use, and register it once.
type Metrics struct {
	attempts    [len(attemptOutcomes)]prometheus.Counter
	acquireDur  prometheus.Histogram
	waits       [len(attemptOutcomes)]prometheus.Observer
	validity    prometheus.Histogram
	holds       [len(holdOutcomes)]prometheus.Observer
	extensions  [len(extendOutcomes)]prometheus.Counter
	renewals    [len(renewalReasons)]prometheus.Counter
	rejected    prometheus.Counter
	waiters     prometheus.Gauge
	votes       *prometheus.CounterVec
	voteDur     *prometheus.HistogramVec
	quarantined *prometheus.GaugeVec
	quarantines *prometheus.CounterVec
	drift       *prometheus.GaugeVec
	jumps       *prometheus.CounterVec
	problems    *prometheus.GaugeVec
	collectors  []prometheus.Collector
	// The end functions the start hooks return, made once: a hook call
	// allocates nothing.
	acquired, held, extended func(redlock.Event)

	mu      sync.RWMutex
	masters map[string]*master // by address: bounded by the masters of the clients served
}

// master holds one master's series, resolved once so that the observer's
// calls do no label lookup.
type master struct {
	votes       [len(votes)]prometheus.Counter
	voteDur     prometheus.Observer
	quarantined prometheus.Gauge
	quarantines prometheus.Counter
	jumps       prometheus.Counter
	drift       prometheus.Gauge
	out         atomic.Bool // quarantined, as last told
}

var _ prometheus.Collector = (*Metrics)(nil)

// Hooks are the client's hooks that count into m: redlock.WithHooks(m.Hooks()).
// They use neither the context nor the resource name they are given.
func (m *Metrics) Hooks() redlock.Hooks {
	return redlock.Hooks{
		Acquire:           m.acquire,
		Attempt:           m.attempt,
		Vote:              m.vote,
		Waiting:           m.waiting,
		Hold:              m.hold,
		Extend:            m.extend,
		MasterQuarantined: m.masterQuarantined,
		MasterRestored:    m.masterRestored,
		MasterDrift:       m.masterDrift,
		MasterClockJumped: m.masterClockJumped,
	}
}

var validName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// New returns metrics named <namespace>_lock_<name>, for example
// quorumlock_lock_fence_rejected_total with namespace "quorumlock"; an
// empty namespace gives lock_<name>. A namespace that is not a Prometheus
// name gives an error wrapping [redlock.ErrInvalidArgument].
func New(namespace string) (*Metrics, error) {
	if namespace != "" && !validName.MatchString(namespace) {
		return nil, fmt.Errorf("redlockprom: namespace %q is not a Prometheus metric name: %w", namespace, redlock.ErrInvalidArgument)
	}
	n := namer(namespace)
	attempts := prometheus.NewCounterVec(n.counter("acquire_attempts_total",
		"Acquisition attempts (TryLock, each attempt of Lock, LockAll) by outcome."), []string{"outcome"})
	extensions := prometheus.NewCounterVec(n.counter("extensions_total",
		"Extend calls, the renewer's included, by outcome."), []string{"outcome"})
	renewals := prometheus.NewCounterVec(n.counter("renewal_failures_total",
		"Locks that the renewer of Lock.Renew ended, by reason."), []string{"reason"})
	waits := prometheus.NewHistogramVec(n.histogram("acquire_wait_seconds",
		"Time a TryLock, Lock, TryLockAll or LockAll call took, its waits and every attempt included, by outcome.", waitBuckets), []string{"outcome"})
	holds := prometheus.NewHistogramVec(n.histogram("hold_duration_seconds",
		"Time a lock was held, from its acquisition to its end on the holder's side, by how it ended.", holdBuckets), []string{"outcome"})
	m := &Metrics{
		acquireDur: prometheus.NewHistogram(n.histogram("acquire_duration_seconds",
			"Time an acquisition attempt took, whatever its outcome, the fence's mint included.", latencyBuckets)),
		validity: prometheus.NewHistogram(n.histogram("acquired_validity_seconds",
			"Lease left when a lock was handed out.", validityBuckets)),
		rejected: prometheus.NewCounter(n.counter("fence_rejected_total",
			"Writes that a fence guard refused because the storage had seen a newer fence.")),
		waiters: prometheus.NewGauge(n.gauge("waiters",
			"Lock calls waiting: after a failed attempt, or queued behind a waiter of their own client.")),
		masters: map[string]*master{},
	}
	m.perMaster(n)
	// Every outcome exists from the start, so that a rate is 0, not absent.
	resolve(attempts, attemptOutcomes[:], m.attempts[:])
	resolve(waits, attemptOutcomes[:], m.waits[:])
	resolve(extensions, extendOutcomes[:], m.extensions[:])
	resolve(renewals, renewalReasons[:], m.renewals[:])
	resolve(holds, holdOutcomes[:], m.holds[:])
	m.acquired, m.held, m.extended = m.acquireEnded, m.holdEnded, m.extendEnded
	m.collectors = []prometheus.Collector{attempts, m.acquireDur, waits, m.validity, holds, extensions, renewals, m.rejected,
		m.waiters, m.votes, m.voteDur, m.quarantined, m.quarantines, m.drift, m.jumps, m.problems}
	return m, nil
}

// perMaster makes the vectors whose series are one per master (one per
// node for the check's problems).
func (m *Metrics) perMaster(n namer) {
	byMaster := []string{"master"}
	m.votes = prometheus.NewCounterVec(n.counter("master_votes_total",
		"Answers of each master to acquisition attempts, by vote."), []string{"master", "vote"})
	m.voteDur = prometheus.NewHistogramVec(n.histogram("master_vote_duration_seconds",
		"Time each master took to answer an acquisition attempt.", latencyBuckets), byMaster)
	m.quarantined = prometheus.NewGaugeVec(n.gauge("master_quarantined",
		"1 while a master's votes do not count toward a quorum (restart guard, or clock monitor with quarantine), else 0."), byMaster)
	m.quarantines = prometheus.NewCounterVec(n.counter("master_quarantines_total",
		"Times a master was put out of the quorum count (restart guard, or clock monitor with quarantine)."), byMaster)
	m.drift = prometheus.NewGaugeVec(n.gauge("master_clock_drift_ratio",
		"Last measured clock rate of a master relative to the client's, less 1 (0.01: 1% fast)."), byMaster)
	m.jumps = prometheus.NewCounterVec(n.counter("master_clock_jumps_total",
		"Jumps of a master's clock seen by the clock monitor."), byMaster)
	m.problems = prometheus.NewGaugeVec(n.gauge("check_problems",
		"Findings at status problem in the last Client.Check recorded, by node."), []string{"node"})
}

// namer is the namespace of a Metrics' series; its methods give the options
// of one series named <namespace>_lock_<name>.
type namer string

func (n namer) opts(name, help string) prometheus.Opts {
	return prometheus.Opts{Namespace: string(n), Subsystem: "lock", Name: name, Help: help}
}

func (n namer) counter(name, help string) prometheus.CounterOpts {
	return prometheus.CounterOpts(n.opts(name, help))
}

func (n namer) gauge(name, help string) prometheus.GaugeOpts {
	return prometheus.GaugeOpts(n.opts(name, help))
}

func (n namer) histogram(name, help string, buckets []float64) prometheus.HistogramOpts {
	return prometheus.HistogramOpts{Namespace: string(n), Subsystem: "lock", Name: name, Help: help, Buckets: buckets}
}

// resolve puts into into[i] the series of vec labelled words[i].
func resolve[T any, V interface{ WithLabelValues(...string) T }](vec V, words []string, into []T) {
	for i, w := range words {
		into[i] = vec.WithLabelValues(w)
	}
}

// Describe implements [prometheus.Collector].
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors {
		c.Describe(ch)
	}
}

// Collect implements [prometheus.Collector].
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors {
		c.Collect(ch)
	}
}

// master returns addr's series, made at the first sight of addr.
func (m *Metrics) master(addr string) *master {
	m.mu.RLock()
	s := m.masters[addr]
	m.mu.RUnlock()
	if s != nil {
		return s
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.masters[addr]; s != nil {
		return s
	}
	s = &master{
		voteDur:     m.voteDur.WithLabelValues(addr),
		quarantined: m.quarantined.WithLabelValues(addr),
		quarantines: m.quarantines.WithLabelValues(addr),
		jumps:       m.jumps.WithLabelValues(addr),
	}
	for i, v := range votes {
		s.votes[i] = m.votes.WithLabelValues(addr, v)
	}
	m.masters[addr] = s
	return s
}

func (m *Metrics) acquire(context.Context, string) (context.Context, func(redlock.Event)) {
	return nil, m.acquired
}

// acquireEnded observes a whole call: for Lock, the wait behind other
// holders, which acquire_duration_seconds (one attempt) does not see.
func (m *Metrics) acquireEnded(e redlock.Event) {
	m.waits[index(attemptOutcomes[:], e.Outcome)].Observe(e.Took.Seconds())
}

func (m *Metrics) attempt(_ context.Context, e redlock.Event) {
	m.attempts[index(attemptOutcomes[:], e.Outcome)].Inc()
	m.acquireDur.Observe(e.Took.Seconds())
	if e.Err == nil {
		m.validity.Observe(e.Validity.Seconds())
	}
}

func (m *Metrics) vote(_ context.Context, e redlock.Event) {
	s := m.master(e.Master)
	s.votes[index(votes[:], e.Outcome)].Inc()
	s.voteDur.Observe(e.Took.Seconds())
}

func (m *Metrics) extend(context.Context, string) func(redlock.Event) { return m.extended }

func (m *Metrics) extendEnded(e redlock.Event) {
	m.extensions[index(extendOutcomes[:], e.Outcome)].Inc()
}

func (m *Metrics) waiting(delta int) { m.waiters.Add(float64(delta)) }

func (m *Metrics) hold(context.Context, string) func(redlock.Event) { return m.held }

// holdEnded observes the hold, and counts a renewed lock that ended but by
// Unlock as a renewal failure: the renewer ended it, or came too late.
func (m *Metrics) holdEnded(e redlock.Event) {
	m.holds[index(holdOutcomes[:], e.Outcome)].Observe(e.Took.Seconds())
	if e.Renewed && e.Outcome != "unlocked" {
		m.renewals[index(renewalReasons[:], e.Outcome)].Inc()
	}
}

// masterQuarantined counts a quarantine whose end moves later once.
func (m *Metrics) masterQuarantined(addr string, _ time.Time) {
	s := m.master(addr)
	s.quarantined.Set(1)
	if !s.out.Swap(true) {
		s.quarantines.Inc()
	}
}

func (m *Metrics) masterRestored(addr string) {
	s := m.master(addr)
	s.quarantined.Set(0)
	s.out.Store(false)
}

// masterDrift sets the drift gauge: rate is the master's clock rate
// relative to the client's.
func (m *Metrics) masterDrift(addr string, rate float64) {
	s := m.master(addr)
	m.mu.Lock()
	if s.drift == nil {
		s.drift = m.drift.WithLabelValues(addr) // absent until measured: 0 would claim a measurement
	}
	g := s.drift
	m.mu.Unlock()
	g.Set(rate - 1)
}

func (m *Metrics) masterClockJumped(addr string, _ time.Duration) {
	m.master(addr).jumps.Inc()
}

// FenceRejected counts one write refused by a guard: pass it as the
// guard's hook, fence.RedisGuard{OnReject: m.FenceRejected} or
// pgfence.Guard{..., OnReject: m.FenceRejected}.
func (m *Metrics) FenceRejected() { m.rejected.Inc() }

// RecordCheck sets, for each node of r (a [redlock.Client.Check] report),
// the number of its findings at [check.Problem]. Call it with each
// scheduled Check; a node is named by its address, or by its place
// ("master 0", "fence counter") when it has none.
func (m *Metrics) RecordCheck(r check.Report) {
	nodes := r.Masters
	if r.Fence != nil {
		nodes = append(nodes[:len(nodes):len(nodes)], *r.Fence)
	}
	for _, n := range nodes {
		bad := 0
		for _, f := range n.Findings {
			if f.Status == check.Problem {
				bad++
			}
		}
		name := n.Addr
		if name == "" {
			name = n.Node
		}
		m.problems.WithLabelValues(name).Set(float64(bad))
	}
}
