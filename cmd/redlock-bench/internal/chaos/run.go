package chaos

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"quorumlock.dev/cmd/redlock-bench/internal/chaoscheck"
	"quorumlock.dev/internal/redisserver"
)

// ErrConfig marks a configuration the suite refuses.
var ErrConfig = errors.New("chaos: bad configuration")

// Config is what [Run] runs. The zero value of a field means its default.
type Config struct {
	Scenarios   []string      // names, in the order given; empty: every scenario
	Runs        int           // runs of each scenario (default 1 with Quick, else 5)
	Quick       bool          // sizes small enough for the test suite
	Masters     int           // lock masters (default 5)
	Workers     int           // worker processes (default 3 with Quick, else 4)
	TTL         time.Duration // lock TTL (default 1 s with Quick, else 2 s)
	NodeTimeout time.Duration // per-master timeout (default 50 ms)
	Retry       time.Duration // the longest pause of a worker after a lost attempt (default 20 ms)
	PGDSN       string        // the store: tables of their own in this PostgreSQL database; "": in memory
	Progress    io.Writer     // a line per finished run, if set
}

func (c *Config) store() string {
	if c.PGDSN != "" {
		return "postgres"
	}
	return "memory"
}

func (c *Config) defaults() error {
	if c.Runs == 0 {
		c.Runs = 5
		if c.Quick {
			c.Runs = 1
		}
	}
	if c.Masters == 0 {
		c.Masters = 5
	}
	if c.Workers == 0 {
		c.Workers = 4
		if c.Quick {
			c.Workers = 3
		}
	}
	if c.TTL == 0 {
		c.TTL = 2 * time.Second
		if c.Quick {
			c.TTL = time.Second
		}
	}
	if c.NodeTimeout == 0 {
		c.NodeTimeout = 50 * time.Millisecond
	}
	if c.Retry == 0 {
		c.Retry = 20 * time.Millisecond
	}
	switch {
	case c.Runs < 1:
		return fmt.Errorf("%w: runs %d", ErrConfig, c.Runs)
	case c.Masters != 5:
		// The scenarios name masters by position (kill 2 of 5, jump the clocks of 3).
		return fmt.Errorf("%w: the scenarios are written for 5 masters, not %d", ErrConfig, c.Masters)
	case c.Workers < 2 || c.Workers > 32:
		return fmt.Errorf("%w: workers %d outside 2..32", ErrConfig, c.Workers)
	case c.TTL < 10*c.NodeTimeout:
		return fmt.Errorf("%w: ttl %v below 10 node timeouts (%v)", ErrConfig, c.TTL, c.NodeTimeout)
	case c.NodeTimeout <= 0 || c.Retry < 0:
		return fmt.Errorf("%w: node timeout %v, retry %v", ErrConfig, c.NodeTimeout, c.Retry)
	}
	for _, name := range c.Scenarios {
		if find(name) == nil {
			return fmt.Errorf("%w: unknown scenario %q (have %s)", ErrConfig, name, strings.Join(Names(), ", "))
		}
	}
	return nil
}

// Row is what the runs of one scenario came to. Counts are summed over the runs; latency
// percentiles are over the attempts of all the runs together; recovery, peaks and the ghost TTL
// are the worst run's.
type Row struct {
	Scenario            string  `json:"scenario"`
	Variant             string  `json:"variant"`       // how the fault was made, where there is a choice
	RestartGuard        bool    `json:"restart_guard"` // the workers' clients ran redlock.WithRestartGuard
	Store               string  `json:"store"`         // memory or postgres
	Runs                int     `json:"runs"`
	Acquisitions        int     `json:"acquisitions"`
	LockOverlaps        int     `json:"lock_overlaps"`
	StaleWrites         int     `json:"stale_writes"`
	StaleWritesRejected int     `json:"stale_writes_rejected"`
	FencedDuplicates    int     `json:"fenced_duplicates"`
	UnfencedDuplicates  int     `json:"unfenced_duplicates"` // the same jobs written with the lock alone
	LostWrites          int     `json:"lost_writes"`
	FencesReused        int     `json:"fences_reused"`
	WithoutMajority     int     `json:"grants_without_majority"`
	Unavailable         int     `json:"unavailable"`
	UnavailableP99Ms    float64 `json:"unavailable_p99_ms"` // how long an attempt took to say so
	FenceUnavailable    int     `json:"fence_unavailable"`
	Errors              int     `json:"errors"`         // attempts that failed otherwise
	AcquireP50Ms        float64 `json:"acquire_p50_ms"` // won attempts while the fault lasted
	AcquireP99Ms        float64 `json:"acquire_p99_ms"`
	HealthyP50Ms        float64 `json:"healthy_p50_ms"` // won attempts before the fault
	RecoveryMs          float64 `json:"recovery_ms"`    // fault's end to the next won lock (-1: none)
	PeakGoroutines      int     `json:"peak_goroutines"`
	PeakHeapMB          float64 `json:"peak_heap_mb"`
	GhostKeys           int     `json:"ghost_keys"` // paused-master-ghost: keys the master applied for nobody
	GhostTTLMs          float64 `json:"ghost_ttl_ms"`
	ClockJumpsDetected  int     `json:"clock_jumps_detected"` // master-clock-jump: jumps a client's clock monitor reported
	Linearizable        string  `json:"linearizable"`         // the fenced store's history: ok, illegal or unknown
	FaultInjected       bool    `json:"fault_injected"`
	Observed            bool    `json:"observed"` // an overlap or a stale write was seen, where the lock alone cannot hold
	Held                bool    `json:"held"`     // every invariant and bound of the scenario held
	Problems            string  `json:"problems"` // what did not hold
	Skipped             string  `json:"skipped"`  // why the scenario could not run here ("": it ran)
}

// Run runs the scenarios and returns a row for each. A run that could not be set up (a server
// that did not start) is an error; a scenario whose invariants failed is a row with Held false.
func Run(ctx context.Context, cfg Config) ([]Row, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	names := cfg.Scenarios
	if len(names) == 0 {
		names = Names()
	}
	var rows []Row
	for _, name := range names {
		sc := find(name)
		var runs []result
		for i := range cfg.Runs {
			res, err := runOnce(ctx, cfg, sc)
			if skip := (*skipError)(nil); errors.As(err, &skip) {
				rows = append(rows, Row{Scenario: sc.name, Variant: cmp.Or(sc.variant, "redis-server"), RestartGuard: sc.guard, Store: cfg.store(), Skipped: skip.Error()})
				runs = nil
				break
			}
			if err != nil {
				return rows, fmt.Errorf("chaos: %s run %d: %w", name, i+1, err)
			}
			if cfg.Progress != nil {
				fmt.Fprintf(cfg.Progress, "chaos: %s run %d/%d: %d locks, overlaps %d, stale writes %d (rejected %d)\n",
					name, i+1, cfg.Runs, res.counts.Acquisitions, res.counts.LockOverlaps, res.counts.StaleWrites, res.counts.StaleWritesRejected)
			}
			runs = append(runs, res)
		}
		if runs != nil {
			rows = append(rows, sc.row(cfg, runs))
		}
	}
	return rows, nil
}

// skipError is a scenario that cannot run on this machine (partitions need root).
type skipError struct{ err error }

func (e *skipError) Error() string { return "skipped: " + e.err.Error() }
func (e *skipError) Unwrap() error { return e.err }

// fault is what a scenario's injection did.
type fault struct {
	injected   bool      // verified: the process was stopped, the port closed, the key gone
	start, end time.Time // when the fault began and ended (end = start for a kill)
	resource   string    // the resource it aimed at, if one: recovery counts only its locks
	ghosts     int
	ghostTTL   time.Duration
	clockJumps int    // jumps the coordinator's clock monitor reported
	variant    string // overrides the scenario's
}

// result is one run's outcome.
type result struct {
	fault    fault
	counts   chaoscheck.Counts
	attempts []attempt
	holdings []chaoscheck.Holding
	majority []int
	peakG    int
	peakHeap uint64
	bad      []string
}

func runOnce(ctx context.Context, cfg Config, sc *scenario) (res result, err error) {
	w := &world{cfg: cfg, sc: sc, rec: newRecorder(), size: sc.sizeFor(cfg)}
	if w.dir, err = os.MkdirTemp("", "chaos-"+sc.name+"-"); err != nil {
		return res, err
	}
	defer func() {
		if err != nil && !errors.As(err, new(*skipError)) {
			w.keep = true
			err = fmt.Errorf("%w (servers' and workers' logs in %s)", err, w.dir)
		}
		w.close()
	}()
	if sc.prepare != nil {
		if err := sc.prepare(ctx, w); err != nil {
			return res, err
		}
	}
	if err := w.startMasters(ctx); err != nil {
		return res, err
	}
	if w.counter, err = w.startRedis(ctx, "counter", redisserver.Options{}); err != nil {
		return res, err
	}
	if err := w.startStore(ctx); err != nil {
		return res, err
	}
	for i := range w.size.workers {
		if err := w.startWorker(i); err != nil {
			return res, err
		}
	}
	// Warm up: every worker's client connected, locks being won.
	if !waitUntil(30*time.Second, func() bool { return w.rec.acquisitions() >= 2*w.size.workers || ctx.Err() != nil }) {
		return res, fmt.Errorf("%d locks won in 30 s of warm-up, want %d", w.rec.acquisitions(), 2*w.size.workers)
	}

	time.Sleep(w.size.steady)
	fctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	res.fault, err = sc.inject(fctx, w)
	cancel()
	if err != nil {
		return res, fmt.Errorf("inject: %w", err)
	}
	// After the fault: time to recover, and for late holders to finish.
	time.Sleep(w.size.ttl + 500*time.Millisecond + w.size.steady)
	for _, wp := range w.workers {
		wp.stop(w.size.ttl + 2*time.Second)
	}
	final, err := w.final(ctx)
	if err != nil {
		return res, err
	}
	h := w.rec.history(final)
	res.counts = chaoscheck.Check(h, 10*time.Second)
	w.rec.mu.Lock()
	res.attempts, res.majority, res.peakG, res.peakHeap, res.bad = w.rec.attempts, w.rec.majority, w.rec.peakG, w.rec.peakHeap, w.rec.bad
	w.rec.mu.Unlock()
	res.holdings = h.Holdings
	return res, nil
}

// recovery is the time from the fault's end to the first lock won after it (on the fault's
// resource, if it had one), or -1.
func (r result) recovery() time.Duration {
	if r.fault.end.IsZero() {
		return -1
	}
	end := r.fault.end.UnixNano()
	best := int64(math.MaxInt64)
	for _, h := range r.holdings {
		if h.Acquired >= end && (r.fault.resource == "" || h.Resource == r.fault.resource) {
			best = min(best, h.Acquired)
		}
	}
	if best == math.MaxInt64 {
		return -1
	}
	return time.Duration(best - end)
}

// row sums the runs of sc and judges them.
func (sc *scenario) row(cfg Config, runs []result) Row {
	r := Row{Scenario: sc.name, Variant: cmp.Or(sc.variant, "redis-server"), RestartGuard: sc.guard, Store: cfg.store(), Runs: len(runs), FaultInjected: true, Linearizable: "ok", RecoveryMs: 0}
	var during, before, unavailable []time.Duration
	for _, res := range runs {
		c := res.counts
		r.Acquisitions += c.Acquisitions
		r.LockOverlaps += c.LockOverlaps
		r.StaleWrites += c.StaleWrites
		r.StaleWritesRejected += c.StaleWritesRejected
		r.FencedDuplicates += c.FencedDuplicates
		r.UnfencedDuplicates += c.UnfencedDuplicates
		r.LostWrites += c.LostWrites
		r.FencesReused += c.FencesReused
		if c.Linearizable != "ok" && r.Linearizable != "illegal" {
			r.Linearizable = c.Linearizable
		}
		r.FaultInjected = r.FaultInjected && res.fault.injected
		if res.fault.variant != "" {
			r.Variant = res.fault.variant
		}
		for _, m := range res.majority {
			if m >= 0 && m < cfg.Masters/2+1 {
				r.WithoutMajority++
			}
		}
		start, end := res.fault.start.UnixNano(), res.fault.end.UnixNano()
		for _, a := range res.attempts {
			switch a.result {
			case "acquired":
				if a.at < start {
					before = append(before, a.latency)
				} else if a.at <= max(end, start+int64(time.Second)) {
					during = append(during, a.latency)
				}
			case "unavailable":
				r.Unavailable++
				unavailable = append(unavailable, a.latency)
			case "fence_unavailable":
				r.FenceUnavailable++
			case "error":
				r.Errors++
			}
		}
		rec := res.recovery()
		if rec < 0 || r.RecoveryMs < 0 {
			r.RecoveryMs = -1
		} else {
			r.RecoveryMs = max(r.RecoveryMs, ms(rec))
		}
		r.PeakGoroutines = max(r.PeakGoroutines, res.peakG)
		r.PeakHeapMB = max(r.PeakHeapMB, float64(res.peakHeap)/(1<<20))
		r.GhostKeys += res.fault.ghosts
		r.GhostTTLMs = max(r.GhostTTLMs, ms(res.fault.ghostTTL))
		r.ClockJumpsDetected += res.fault.clockJumps
		if len(res.bad) > 0 {
			r.Errors += len(res.bad)
		}
	}
	r.AcquireP50Ms, r.AcquireP99Ms = ms(percentile(during, 0.50)), ms(percentile(during, 0.99))
	r.HealthyP50Ms = ms(percentile(before, 0.50))
	r.UnavailableP99Ms = ms(percentile(unavailable, 0.99))
	r.Observed = r.LockOverlaps > 0 || r.StaleWrites > 0

	var problems []string
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if !r.FaultInjected {
		fail("the fault was not verified in every run")
	}
	if r.FencedDuplicates != 0 {
		fail("%d fenced duplicates", r.FencedDuplicates)
	}
	if r.LostWrites != 0 {
		fail("%d lost writes", r.LostWrites)
	}
	if r.FencesReused != 0 {
		fail("%d fences handed out twice", r.FencesReused)
	}
	if r.StaleWritesRejected != r.StaleWrites {
		fail("%d of %d stale writes accepted", r.StaleWrites-r.StaleWritesRejected, r.StaleWrites)
	}
	if r.Linearizable != "ok" {
		fail("store history %s", r.Linearizable)
	}
	if r.WithoutMajority != 0 {
		fail("%d locks granted without a majority holding the token", r.WithoutMajority)
	}
	if sc.mustObserve && !r.Observed {
		fail("no overlap and no stale write: the fault did not provoke what it is for")
	}
	if sc.mustObserve && r.UnfencedDuplicates == 0 {
		fail("the lock alone let no duplicate through: the unfenced twin shows nothing")
	}
	if sc.judge != nil {
		sc.judge(cfg, runs, &r, fail)
	}
	r.Held = len(problems) == 0
	r.Problems = strings.Join(problems, "; ")
	return r
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(i, 0)]
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e4) / 100 }
