package chaos

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"quorumlock.dev/cmd/redlock-bench/internal/chaoscheck"
	"quorumlock.dev/cmd/redlock-bench/internal/chaosreport"
	"quorumlock.dev/cmd/redlock-bench/internal/chaosstore"
	"quorumlock.dev/cmd/redlock-bench/internal/chaosworker"
	"quorumlock.dev/cmd/redlock-bench/internal/chaosworld"
)

// MaybeWorker runs the worker and exits when the process was started as one; otherwise it
// returns at once. A program that runs chaos scenarios calls it first thing in main (or
// TestMain), since the workers are that same program started again.
func MaybeWorker() { chaosworker.MaybeRun() }

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
	Progress    io.Writer     // a line per finished run, if set

	// Store is the fenced store: tables of their own in a database; the zero Spec: in memory.
	Store chaosstore.Spec
}

func (c *Config) store() string { return cmp.Or(c.Store.Kind, chaosstore.Memory) }

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

// Check returns the error ([ErrConfig]) that Run would return for cfg, so
// that a caller can refuse a bad configuration before it starts a server.
func Check(cfg Config) error { return cfg.defaults() }

// Row is what the runs of one scenario came to: a row of the chaos table.
type Row = chaosreport.Row

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
		var runs []chaosreport.Run
		for i := 0; i < cfg.Runs+sc.extraRuns(cfg); i++ {
			if i >= cfg.Runs && provoked(runs) {
				break
			}
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
				again := ""
				if i >= cfg.Runs {
					again = " (again: the runs before did not provoke the failure)"
				}
				fmt.Fprintf(cfg.Progress, "chaos: %s run %d/%d%s: %d locks, overlaps %d, stale writes %d (rejected %d)%s\n",
					name, i+1, cfg.Runs, again, res.Counts.Acquisitions, res.Counts.LockOverlaps, res.Counts.StaleWrites, res.Counts.StaleWritesRejected,
					failoverNote(res.Fault.Failovers))
			}
			runs = append(runs, res)
		}
		if runs != nil {
			rows = append(rows, sc.row(cfg, runs))
		}
	}
	return rows, nil
}

// quickAgain is how many more runs the quick size makes of a scenario whose
// runs did not provoke the failure it exists for. Such a fault races a
// holder's hold: on a loaded machine the fault can take longer to land than
// the hold lasts (a Sentinel failover took over 3.5 s once under CI), and the
// contender then wins after the holder left. Every run counts for the
// invariants; only the "provoked" check waits for a run that reached it.
const quickAgain = 2

func (sc *scenario) extraRuns(cfg Config) int {
	if cfg.Quick && sc.mustObserve {
		return quickAgain
	}
	return 0
}

// provoked reports whether the runs so far show what a mustObserve scenario
// exists for: an overlap or a stale write, and a duplicate in the unfenced twin.
func provoked(runs []chaosreport.Run) bool {
	var seen, dup bool
	for _, r := range runs {
		seen = seen || r.Counts.LockOverlaps > 0 || r.Counts.StaleWrites > 0
		dup = dup || r.Counts.UnfencedDuplicates > 0
	}
	return seen && dup
}

// failoverNote is a run's failovers for its progress line: each, up to 5, else the longest.
func failoverNote(d []time.Duration) string {
	switch {
	case len(d) == 0:
		return ""
	case len(d) <= 5:
		return fmt.Sprintf(", failovers %v", d)
	default:
		return fmt.Sprintf(", %d failovers, the longest %v", len(d), slices.Max(d))
	}
}

// skipError is a scenario that cannot run on this machine (partitions need root).
type skipError struct{ err error }

func (e *skipError) Error() string { return "skipped: " + e.err.Error() }
func (e *skipError) Unwrap() error { return e.err }

// world is one run of a scenario: what every run has, and the suite's configuration. What
// only one scenario's fault needs is that fault's.
type world struct {
	*chaosworld.World
	cfg  Config
	size size
}

// size is what a run's length and load come to, from Config and the scenario.
type size struct {
	workers, loops, resources int
	ttl, hold                 time.Duration
	steady                    time.Duration // healthy running before the fault and after the recovery time
}

func runOnce(ctx context.Context, cfg Config, sc *scenario) (res chaosreport.Run, err error) {
	s := sc.sizeFor(cfg)
	cw, err := chaosworld.New(sc.name, chaosworld.Spec{
		Masters: cfg.Masters, NodeTimeout: cfg.NodeTimeout, Retry: cfg.Retry, Store: cfg.Store,
		Workers: s.workers, Loops: s.loops, Resources: s.resources, TTL: s.ttl, Hold: s.hold,
		Proxied: sc.proxied, Guard: sc.guard,
		Leader: sc.leader, ResignEvery: sc.resignEvery, WorkerProxies: sc.workerProxies,
	})
	if err != nil {
		return res, err
	}
	w := &world{World: cw, cfg: cfg, size: s}
	defer func() {
		keep := err != nil && !errors.As(err, new(*skipError))
		if keep {
			err = fmt.Errorf("%w (servers' and workers' logs in %s)", err, w.Dir)
		}
		w.Close(keep)
	}()
	inj := sc.fault()
	if err := inj.prepare(ctx, w); err != nil {
		return res, err
	}
	if err := w.Start(ctx, inj.server); err != nil {
		return res, err
	}

	time.Sleep(w.size.steady)
	fctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	res.Fault, err = inj.inject(fctx, w)
	cancel()
	if err != nil {
		return res, fmt.Errorf("inject: %w", err)
	}
	// After the fault: time to recover, and for late holders to finish.
	time.Sleep(w.size.ttl + 500*time.Millisecond + w.size.steady)
	h, sum, err := w.Stop(ctx)
	if err != nil {
		return res, err
	}
	res.Counts, res.Holdings, res.Summary = chaoscheck.Check(h, 10*time.Second), h.Holdings, sum
	return res, nil
}

// row sums the runs of sc and judges them.
func (sc *scenario) row(cfg Config, runs []chaosreport.Run) Row {
	r := Row{Scenario: sc.name, Variant: cmp.Or(sc.variant, "redis-server"), RestartGuard: sc.guard, Store: cfg.store()}
	var problems []string
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	chaosreport.Sum(&r, cfg.Masters, runs, fail)
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
