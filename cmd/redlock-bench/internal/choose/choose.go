// Package choose measures the four locks of the lock-choice table on this machine, for
// redlock-bench choose: a single Redis (SET NX PX through redlock.Client over one master),
// Redlock over five masters with a fence from a separate Redis counter, etcd's
// concurrency.Mutex with its revision as fence, and a PostgreSQL row lock with a version
// column. For each it measures acquire latency and cycles per second at each concurrency, and
// runs two short experiments: a holder paused past its lease writes through the option's
// guard (or none), and a primary or member is killed while a lock is held. It starts the
// servers it needs and stops them; it does not compare the options, the reader does.
package choose

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"time"

	"quorumlock.dev/cmd/redlock-bench/internal/lockload"
)

// ErrNotInstalled says that a server an option needs is not on this machine.
var ErrNotInstalled = errors.New("choose: server not installed")

// ErrConfig wraps every invalid [Config].
var ErrConfig = errors.New("choose: bad configuration")

// Options lists the options in the table's order.
var Options = []string{"single-redis", "redlock", "etcd", "postgres"}

// Config is what [Run] measures. The zero value of a field means its default.
type Config struct {
	Options     []string      // a subset of [Options]; default all
	Backend     string        // the Redis servers: embedded (miniredis, default) or redis-server
	Concurrency []int         // goroutines per row; default 1, 8, 64
	Duration    time.Duration // measuring time per row; default 1s
	Keys        int           // resources the locks are spread over; default 10000
	TTL         time.Duration // the measured locks' lease; default 10s
	NodeTimeout time.Duration // redlock's per-master timeout; default 50ms
	// Lease is the experiments' lease: the paused holder's (etcd rounds it up to whole
	// seconds, and its server to at least 2 s); default 300ms. The pause is twice as long.
	Lease time.Duration
	// Require makes a missing server an error instead of a skipped option (CI).
	Require bool
	// Progress, when set, receives a line as each option starts and when one is skipped.
	Progress io.Writer
}

func (c *Config) defaults() error {
	if len(c.Options) == 0 {
		c.Options = slices.Clone(Options)
	}
	for _, o := range c.Options {
		if !slices.Contains(Options, o) {
			return fmt.Errorf("%w: unknown option %q (want %v)", ErrConfig, o, Options)
		}
	}
	switch c.Backend {
	case "":
		c.Backend = "embedded"
	case "embedded", "redis-server":
	default:
		return fmt.Errorf("%w: backend %q (want embedded or redis-server)", ErrConfig, c.Backend)
	}
	if len(c.Concurrency) == 0 {
		c.Concurrency = []int{1, 8, 64}
	}
	for _, n := range c.Concurrency {
		if n < 1 || n > 1024 {
			return fmt.Errorf("%w: concurrency %d outside 1..1024", ErrConfig, n)
		}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.Duration, time.Second)
	def(&c.TTL, 10*time.Second)
	def(&c.NodeTimeout, 50*time.Millisecond)
	def(&c.Lease, 300*time.Millisecond)
	if c.Keys == 0 {
		c.Keys = 10000
	}
	switch {
	case c.Duration < 0 || c.TTL < time.Second || c.NodeTimeout < 0 || c.Lease < 10*time.Millisecond:
		return fmt.Errorf("%w: -d %v, -ttl %v (at least 1s: etcd's lease is whole seconds), node timeout %v, lease %v",
			ErrConfig, c.Duration, c.TTL, c.NodeTimeout, c.Lease)
	case c.NodeTimeout >= c.Lease:
		return fmt.Errorf("%w: node timeout %v must be below the lease %v", ErrConfig, c.NodeTimeout, c.Lease)
	case c.Keys < 1 || c.Keys > 1_000_000:
		return fmt.Errorf("%w: keys %d outside 1..1000000", ErrConfig, c.Keys)
	}
	return nil
}

// Report is one run: a row per option and concurrency, and the options skipped.
type Report struct {
	Started    time.Time `json:"started"`
	Elapsed    float64   `json:"elapsed_s"`
	Backend    string    `json:"backend"` // of the Redis options
	GoMaxProcs int       `json:"gomaxprocs"`
	DurationS  float64   `json:"duration_s"` // per row
	TTLms      float64   `json:"ttl_ms"`
	Keys       int       `json:"keys"`
	Results    []Row     `json:"results"`
	Skipped    []Skip    `json:"skipped"`
}

// Skip is an option that did not run, and why.
type Skip struct {
	Option string `json:"option"`
	Reason string `json:"reason"`
}

// Row is one option at one concurrency; the fence and failure columns are the option's and
// repeat on each of its rows, so that CSV and JSON carry the same flat fields. Latencies are
// in microseconds, over every acquire attempt.
type Row struct {
	Option       string  `json:"option"`
	Concurrency  int     `json:"concurrency"`
	Attempts     int64   `json:"attempts"`
	Cycles       int64   `json:"cycles"`    // acquired and released
	Contended    int64   `json:"contended"` // refused: another goroutine held the resource
	Errors       int64   `json:"errors"`    // failed attempts or releases (a master past the node timeout...), counted, not fatal
	AcquireP50Us float64 `json:"acquire_p50_us"`
	AcquireP90Us float64 `json:"acquire_p90_us"`
	AcquireP99Us float64 `json:"acquire_p99_us"`
	AcquireP999  float64 `json:"acquire_p999_us"`
	CyclesPerSec float64 `json:"cycles_per_sec"`
	Fence        string  `json:"fence"`
	// StaleWriteAccepted: a holder paused past its lease wrote after the next holder, through
	// the option's guard (or none), and its value is what the store kept.
	StaleWriteAccepted bool   `json:"stale_write_accepted"`
	StaleWrite         string `json:"stale_write"` // what the experiment saw
	AfterFailover      string `json:"after_failover"`
}

// option is one lock of the table, its servers started.
type option interface {
	fence() string
	// locker returns one goroutine's way to lock, for locks of ttl.
	locker(ctx context.Context, ttl time.Duration) (lockload.Locker, error)
	// stale runs the paused-holder experiment: accepted, and what was seen.
	stale(ctx context.Context, cfg Config) (bool, string, error)
	// failover kills a primary or member while a lock is held and says what followed.
	failover(ctx context.Context, cfg Config) (string, error)
	close()
}

// Run measures cfg.Options in the table's order. An option whose server is not installed
// is skipped with its reason in Report.Skipped, or fails the run when cfg.Require is set;
// any other failure ends the run with an error.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	rep := &Report{
		Started: time.Now(), Backend: cfg.Backend, GoMaxProcs: runtime.GOMAXPROCS(0),
		DurationS: cfg.Duration.Seconds(), TTLms: float64(cfg.TTL) / 1e6, Keys: cfg.Keys,
		Results: []Row{}, Skipped: []Skip{},
	}
	for _, name := range Options {
		if !slices.Contains(cfg.Options, name) {
			continue
		}
		progress(cfg, "choose: %s", name)
		rows, err := runOption(ctx, cfg, name)
		if errors.Is(err, ErrNotInstalled) && !cfg.Require {
			rep.Skipped = append(rep.Skipped, Skip{Option: name, Reason: err.Error()})
			progress(cfg, "choose: %s skipped: %v", name, err)
			continue
		}
		if err != nil {
			return rep, fmt.Errorf("choose: %s: %w", name, err)
		}
		rep.Results = append(rep.Results, rows...)
	}
	rep.Elapsed = time.Since(rep.Started).Seconds()
	return rep, nil
}

func progress(cfg Config, format string, args ...any) {
	if cfg.Progress != nil {
		fmt.Fprintf(cfg.Progress, format+"\n", args...)
	}
}

func runOption(ctx context.Context, cfg Config, name string) ([]Row, error) {
	opt, err := open(ctx, cfg, name)
	if err != nil {
		return nil, err
	}
	defer opt.close()
	var rows []Row
	for _, c := range cfg.Concurrency {
		row, err := measure(ctx, cfg, opt, c)
		if err != nil {
			return nil, err
		}
		row.Option = name
		rows = append(rows, row)
	}
	accepted, seen, err := opt.stale(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("stale-write experiment: %w", err)
	}
	after, err := opt.failover(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("failover experiment: %w", err)
	}
	for i := range rows {
		rows[i].Fence, rows[i].StaleWriteAccepted, rows[i].StaleWrite, rows[i].AfterFailover = opt.fence(), accepted, seen, after
	}
	return rows, nil
}

func open(ctx context.Context, cfg Config, name string) (option, error) {
	switch name {
	case "single-redis":
		return openRedis(ctx, cfg, 1)
	case "redlock":
		return openRedis(ctx, cfg, 5)
	case "etcd":
		return openEtcd(ctx, cfg)
	default:
		return openPostgres(ctx, cfg)
	}
}

// measure runs c goroutines, each with its own locker, taking and releasing locks on random
// keys for cfg.Duration. Failed calls are counted; a row without a single cycle is an error.
func measure(ctx context.Context, cfg Config, opt option, c int) (Row, error) {
	lockers := make([]lockload.Locker, 0, c)
	defer func() {
		for _, l := range lockers {
			l.Close()
		}
	}()
	for range c {
		l, err := opt.locker(ctx, cfg.TTL)
		if err != nil {
			return Row{}, err
		}
		lockers = append(lockers, l)
	}
	res, err := lockload.Measure(ctx, lockers, lockload.Load{Duration: cfg.Duration, TTL: cfg.TTL, Prefix: "choose:", Keys: cfg.Keys})
	return Row{
		Concurrency: c, Attempts: res.Attempts, Cycles: res.Cycles, Contended: res.Contended, Errors: res.Errors,
		AcquireP50Us: res.P50Us, AcquireP90Us: res.P90Us, AcquireP99Us: res.P99Us, AcquireP999: res.P999Us,
		CyclesPerSec: res.CyclesPerSec,
	}, err
}
