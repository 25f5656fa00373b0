// Package benchrun measures the redlock client against its single-instance
// mode: it opens a backend, builds each scenario's variants and measures them
// in alternating slices into a [report.Report]. The uncontended scenarios
// make one TryLock attempt per cycle; the contended one calls Lock, which
// waits, and its -procs rows run in worker processes ([MaybeWorker]). It
// writes nothing itself.
package benchrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"quorumlock.dev/cmd/redlock-bench/internal/backend"
	"quorumlock.dev/cmd/redlock-bench/internal/drivers"
	"quorumlock.dev/cmd/redlock-bench/internal/progress"
	"quorumlock.dev/cmd/redlock-bench/internal/report"
	"quorumlock.dev/fence"
	"quorumlock.dev/internal/harness/critical"
	"quorumlock.dev/internal/harness/faultproxy"
	"quorumlock.dev/redlock"

	"quorumlock.dev/driver"
)

// Scenarios lists what -scenario accepts.
var Scenarios = []string{"healthy", "slow", "dead", "scale", "contended"}

// ScaleMasters are the master counts of the scale scenario.
var ScaleMasters = []int{1, 3, 5, 7, 9}

// ErrConfig reports settings that cannot make a run.
var ErrConfig = errors.New("benchrun: invalid configuration")

// Config is one run of the benchmark.
type Config struct {
	Backend     backend.Config // where the servers come from; Backend.Masters is set by Run
	Scenario    string
	Masters     int   // masters of the redlock mode (healthy, slow, dead)
	Concurrency []int // goroutines; one row per value and variant
	Duration    time.Duration
	Cycles      int64 // per row; when set, it replaces Duration
	TTL         time.Duration
	NodeTimeout time.Duration
	Keys        int           // resources to spread the locks over; 1 is full contention
	Hold        time.Duration // simulated critical section
	Fence       bool
	Delay       time.Duration // slow scenario
	Dead        int           // dead scenario
	Rounds      int           // each row is measured in this many slices, alternating with the other rows of its group
	Clients     int           // contended scenario: also rows where the goroutines share this many clients (goroutine i uses client i mod Clients), as separate processes would have; 0 for none
	Procs       int           // contended scenario: also rows where the goroutines run in this many worker processes (goroutine i in process i mod Procs), each with a client of its own; 0 for none
	Drivers     []string      // the Redis clients of drivers.Names, each a dimension of every variant; none means drivers.Default
	Raw         bool          // healthy scenario: also the raw quorum loop (rawLoop) per driver
	Progress    io.Writer     // where to draw a progress bar; nil for none
}

// Validate reports the first setting that cannot make a run.
func (c *Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
	}
	switch {
	case !slices.Contains(Scenarios, c.Scenario):
		return bad("unknown scenario %q (want one of %v)", c.Scenario, Scenarios)
	case c.Masters < 1 || c.Masters > 16:
		return bad("masters %d outside 1..16", c.Masters)
	case len(c.Concurrency) == 0:
		return bad("no concurrency given")
	case c.Duration <= 0 && c.Cycles <= 0:
		return bad("need a positive duration or cycle count")
	case c.Cycles < 0:
		return bad("negative cycle count %d", c.Cycles)
	case c.TTL <= c.NodeTimeout:
		return bad("ttl %v must be longer than the node timeout %v", c.TTL, c.NodeTimeout)
	case c.NodeTimeout <= 0:
		return bad("node timeout %v is not positive", c.NodeTimeout)
	case c.Keys < 1 || c.Keys > 1_000_000:
		return bad("keys %d outside 1..1000000", c.Keys)
	case c.Hold < 0:
		return bad("negative hold %v", c.Hold)
	case c.Rounds < 1:
		return bad("rounds %d below 1", c.Rounds)
	case c.Clients < 0 || c.Clients > 4096:
		return bad("clients %d outside 0..4096", c.Clients)
	case c.Clients > 0 && c.Scenario != "contended":
		return bad("-clients applies to the contended scenario only")
	case c.Procs < 0 || c.Procs > 64:
		return bad("procs %d outside 0..64", c.Procs)
	case c.Procs > 0 && c.Scenario != "contended":
		return bad("-procs applies to the contended scenario only")
	case c.Raw && c.Scenario != "healthy":
		return bad("the raw quorum loop (-raw) applies to the healthy scenario only")
	case c.Scenario == "slow" && c.Delay <= 0:
		return bad("the slow scenario needs a positive -delay")
	case c.Scenario == "dead" && (c.Dead < 1 || c.Dead > c.Masters):
		return bad("dead %d outside 1..%d masters", c.Dead, c.Masters)
	}
	for _, d := range c.Drivers {
		if !slices.Contains(drivers.Names, d) {
			return fmt.Errorf("%w: %w %q (want one or more of %v)", ErrConfig, drivers.ErrUnknown, d, drivers.Names)
		}
	}
	for _, n := range c.Concurrency {
		if n < 1 || n > 4096 {
			return bad("concurrency %d outside 1..4096", n)
		}
	}
	return nil
}

// variant is one thing measured: a lock client over some masters.
type variant struct {
	row       report.Row // the fixed fields of its rows
	label     string     // how a ratio names it
	ratioTo   string     // the label of the variant this one is compared with; "" for none
	client    *redlock.Client
	clients   []*redlock.Client // when not nil: goroutine i uses clients[i mod len] (client is clients[0])
	resources []string
	guards    []*guard         // one per resource in the contended scenario, else nil
	rounds    *rounds          // its clients' attempts, in the contended scenario, else nil
	redsync   []*redsyncLocker // a redsync row's: goroutine i's, instead of client
	procs     *procRow         // a -procs row's worker processes, instead of client
	raw       *rawLoop         // the raw quorum loop instead of client, when not nil
}

// Run opens the backend, measures every variant of the scenario at every
// concurrency, closes the backend and returns the report. When ctx ends, Run
// stops measuring, cleans up and returns ctx's error.
func Run(ctx context.Context, cfg Config) (*report.Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(cfg.Drivers) == 0 {
		cfg.Drivers = []string{drivers.Default}
	}
	need := cfg.Masters
	if cfg.Scenario == "scale" {
		need = slices.Max(ScaleMasters)
	}
	cfg.Backend.Masters = need
	env, err := backend.Open(ctx, cfg.Backend)
	if err != nil {
		return nil, err
	}
	defer env.Close(context.WithoutCancel(ctx))
	if cfg.Fence && env.Fence == "" {
		return nil, fmt.Errorf("%w: -fence needs a fence node (-fence-addr with -addrs)", ErrConfig)
	}

	rep := &report.Report{
		Backend:          env.Backend,
		ServersInProcess: env.InProcess,
		Servers:          env.Servers,
		Started:          time.Now().UTC(),
		GoMaxProcs:       runtime.GOMAXPROCS(0),
		GoVersion:        runtime.Version(),
		Platform:         runtime.GOOS + "/" + runtime.GOARCH,
		Config: report.ConfigEcho{
			Scenario: cfg.Scenario, Masters: cfg.Masters, TTLms: report.Milliseconds(cfg.TTL), NodeTimeout: report.Milliseconds(cfg.NodeTimeout),
			HoldMs: report.Milliseconds(cfg.Hold), Keys: cfg.Keys, Fence: cfg.Fence, Rounds: cfg.Rounds,
			DurationS: cfg.Duration.Seconds(), Cycles: cfg.Cycles, Drivers: cfg.Drivers, Raw: cfg.Raw,
		},
	}
	if cfg.Cycles > 0 {
		rep.Config.DurationS = 0
	}
	s := &setup{cfg: cfg, env: env, options: env.ClientOptions, fence: env.Fence, sets: map[string]*drivers.Set{}}
	defer s.close()
	variants, err := s.variants()
	if err != nil {
		return nil, err
	}
	bar := newBar(cfg, len(variants))
	defer bar.Finish()
	start := time.Now()
	for _, c := range cfg.Concurrency {
		rows, err := measure(ctx, cfg, variants, c, bar)
		if err != nil {
			return nil, err
		}
		rep.Results = append(rep.Results, rows...)
	}
	rep.Elapsed = time.Since(start).Seconds()
	return rep, nil
}

// setup builds the variants of a scenario and owns what they need.
type setup struct {
	cfg     Config
	env     *backend.Env                     // nil in a -procs worker, which makes no variants
	options func(addr string) *redis.Options // how to reach a server: env.ClientOptions, or a worker's
	fence   string                           // the fence counter's address
	sets    map[string]*drivers.Set          // by driver name
	locks   []*redlock.Client
	proxies []*faultproxy.Proxy
	redsync []*redis.Client // the redsync rows'
}

func (s *setup) close() {
	for _, c := range s.locks {
		_ = c.Close() // its subscriptions, before the connections they use
	}
	for _, c := range s.redsync {
		_ = c.Close()
	}
	for _, set := range s.sets {
		set.Close()
	}
	for _, p := range s.proxies {
		_ = p.Close()
	}
}

// conn is a connection to addr through driver d, configured as package
// drivers says; go-redis's pool is sized so that it is not what limits the
// highest concurrency.
func (s *setup) conn(d, addr string) (driver.Conn, error) {
	set := s.sets[d]
	if set == nil {
		var err error
		if set, err = drivers.New(d); err != nil {
			return nil, err
		}
		s.sets[d] = set
	}
	// The user, password and TLS of an addrs server.
	return set.Conn(s.options(addr), 2*slices.Max(s.cfg.Concurrency)+10)
}

func (s *setup) conns(d string, addrs []string) ([]driver.Conn, error) {
	conns := make([]driver.Conn, len(addrs))
	for i, a := range addrs {
		c, err := s.conn(d, a)
		if err != nil {
			return nil, err
		}
		conns[i] = c
	}
	return conns, nil
}

// lockClient is a client over addrs through driver d. fair queues waiters
// (WithFairness); poll hides the masters' Subscribe, so that a waiter
// sleeps the retry delay as Lock did before its release was pushed to
// waiters. Its attempts are counted in counted, unless that is nil.
func (s *setup) lockClient(d string, addrs []string, fair, poll bool, counted *rounds) (*redlock.Client, error) {
	masters, err := s.conns(d, addrs)
	if err != nil {
		return nil, err
	}
	for i := range masters {
		if poll {
			masters[i] = plainMaster{masters[i]}
		}
	}
	opts := []redlock.Option{redlock.WithNodeTimeout(s.cfg.NodeTimeout)}
	if fair {
		// 1 s, the entry TTL WithFairness suggests, unless the option's minimum
		// of 4 node timeouts is longer.
		opts = append(opts, redlock.WithFairness(max(time.Second, 4*s.cfg.NodeTimeout)))
	}
	if counted != nil {
		opts = append(opts, redlock.WithHooks(redlock.Hooks{Attempt: counted.attempted}))
	}
	if s.cfg.Fence {
		fc, err := s.conn(d, s.fence)
		if err != nil {
			return nil, err
		}
		counter, err := fence.NewRedisCounter(fc)
		if err != nil {
			return nil, err
		}
		opts = append(opts, redlock.WithFence(counter))
	}
	c, err := redlock.New(masters, opts...)
	if err == nil {
		s.locks = append(s.locks, c)
	}
	return c, err
}

// plainMaster is a master with only the Master methods: no Subscribe.
type plainMaster struct{ driver.Conn }

func (s *setup) proxy(upstream string, delay time.Duration) (string, error) {
	p, err := faultproxy.New(upstream)
	if err != nil {
		return "", err
	}
	s.proxies = append(s.proxies, p)
	p.SetDelay(delay)
	return p.Addr(), nil
}

// variants lists what the scenario compares, each with its own clients
// (and proxies), so that no fault is switched on and off during the run.
func (s *setup) variants() ([]*variant, error) {
	cfg, env := s.cfg, s.env
	n := cfg.Masters
	base := report.Row{Scenario: cfg.Scenario, Keys: cfg.Keys, Fence: cfg.Fence, HoldMs: report.Milliseconds(cfg.Hold)}
	var specs []spec
	switch cfg.Scenario {
	case "healthy", "contended":
		ratioTo := "single"
		if cfg.Scenario == "contended" {
			// Its latencies are waits for each other: the p50 of one over
			// the other is not the cost of a quorum.
			ratioTo = ""
		}
		specs = []spec{
			{mode: "single", label: "single", addrs: []string{env.Single}},
			{mode: "redlock", label: "redlock", ratioTo: ratioTo, addrs: env.Masters[:n]},
		}
		if cfg.Raw {
			specs = append(specs, spec{mode: "raw", label: "raw", ratioTo: ratioTo, addrs: env.Masters[:n], raw: true})
		}
		if cfg.Scenario == "contended" {
			specs = append(specs,
				spec{mode: "redlock", label: "redlock fair", addrs: env.Masters[:n], fair: true},
				spec{mode: "redlock", label: "redlock poll", addrs: env.Masters[:n], poll: true})
			if k := cfg.Clients; k > 0 {
				specs = append(specs,
					spec{mode: "redlock", label: fmt.Sprintf("redlock %d clients", k), addrs: env.Masters[:n], clients: k},
					spec{mode: "redlock", label: fmt.Sprintf("redlock fair %d clients", k), addrs: env.Masters[:n], fair: true, clients: k},
					spec{mode: "redsync", label: fmt.Sprintf("redsync %d clients", k), addrs: env.Masters[:n], clients: k, redsync: true})
			}
			if p := cfg.Procs; p > 0 {
				specs = append(specs,
					spec{mode: "redlock", label: fmt.Sprintf("redlock %d procs", p), addrs: env.Masters[:n], procs: p},
					spec{mode: "redlock", label: fmt.Sprintf("redlock fair %d procs", p), addrs: env.Masters[:n], fair: true, procs: p})
			}
		}
	case "slow":
		// Both rows go through a proxy to the same master, so its own cost
		// is not mistaken for the slow master's.
		fast, err := s.proxy(env.Masters[n-1], 0)
		if err != nil {
			return nil, err
		}
		slow, err := s.proxy(env.Masters[n-1], cfg.Delay)
		if err != nil {
			return nil, err
		}
		specs = []spec{
			{mode: "redlock", label: "delay_ms=0", addrs: append(slices.Clone(env.Masters[:n-1]), fast)},
			{mode: "redlock", label: fmt.Sprintf("delay_ms=%g", report.Milliseconds(cfg.Delay)), ratioTo: "delay_ms=0",
				addrs: append(slices.Clone(env.Masters[:n-1]), slow), delay: cfg.Delay},
		}
	case "dead":
		addrs := slices.Clone(env.Masters[:n-cfg.Dead])
		for range cfg.Dead {
			a, err := backend.FreeAddr()
			if err != nil {
				return nil, err
			}
			addrs = append(addrs, a)
		}
		specs = []spec{
			{mode: "redlock", label: "healthy", addrs: env.Masters[:n]},
			{mode: "redlock", label: fmt.Sprintf("dead=%d", cfg.Dead), ratioTo: "healthy", addrs: addrs, dead: cfg.Dead},
		}
	case "scale":
		for _, m := range ScaleMasters {
			ratioTo := "masters=3"
			if m == 3 {
				ratioTo = ""
			}
			specs = append(specs, spec{mode: "redlock", label: fmt.Sprintf("masters=%d", m), ratioTo: ratioTo, addrs: env.Masters[:m]})
		}
	}

	// Every variant once per driver, the drivers' rows of one variant side
	// by side; all of them alternate in measure's slices. redsync has a
	// driver of its own: its go-redis adapter.
	var variants []*variant
	for _, sp := range specs {
		ds := cfg.Drivers
		if sp.redsync {
			ds = []string{drivers.GoRedis}
		}
		for _, d := range ds {
			v, err := s.variant(base, d, sp)
			if err != nil {
				return nil, err
			}
			variants = append(variants, v)
		}
	}
	for i, v := range variants {
		for k := range v.resources {
			v.resources[k] = fmt.Sprintf("%s:%d:%d", env.Prefix, i, k)
		}
		if cfg.Scenario == "contended" {
			v.guards = make([]*guard, cfg.Keys)
			for k := range v.guards {
				v.guards[k] = &guard{}
			}
		}
	}
	return variants, nil
}

// spec is one variant of a scenario, before it is made for a driver.
type spec struct {
	mode, label, ratioTo string
	addrs                []string
	delay                time.Duration
	dead                 int
	fair, poll, raw      bool
	clients              int  // separate clients; 0: one shared
	redsync              bool // redsync instead of redlock, over clients separate go-redis clients
	procs                int  // worker processes, each goroutine with a client of its own; 0: none
}

// variant makes sp through driver d, with clients of its own.
func (s *setup) variant(base report.Row, d string, sp spec) (*variant, error) {
	row := base
	row.Mode, row.Variant, row.Masters, row.DelayMs, row.Dead = sp.mode, sp.label, len(sp.addrs), report.Milliseconds(sp.delay), sp.dead
	row.Driver = d
	v := &variant{row: row, label: sp.label, ratioTo: sp.ratioTo, resources: make([]string, s.cfg.Keys)}
	if s.cfg.Scenario == "contended" {
		v.rounds = &rounds{}
	}
	if sp.raw {
		conns, err := s.conns(d, sp.addrs)
		if err != nil {
			return nil, err
		}
		v.raw = &rawLoop{masters: conns, nodeTimeout: s.cfg.NodeTimeout}
		return v, nil
	}
	if sp.redsync {
		v.redsync = s.redsyncLockers(sp.addrs, sp.clients, v.rounds)
		return v, nil
	}
	if sp.procs > 0 {
		v.procs = s.procRow(d, sp)
		return v, nil
	}
	client, err := s.lockClient(d, sp.addrs, sp.fair, sp.poll, v.rounds)
	if err != nil {
		return nil, err
	}
	v.client = client
	if sp.clients > 0 {
		// Each with Redis clients of its own: nothing is shared but the
		// masters, and nothing can be passed in-process.
		v.clients = []*redlock.Client{client}
		for range sp.clients - 1 {
			c, err := s.lockClient(d, sp.addrs, sp.fair, sp.poll, v.rounds)
			if err != nil {
				return nil, err
			}
			v.clients = append(v.clients, c)
		}
	}
	return v, nil
}

// redsyncLockers are one redsync per goroutine of the highest concurrency:
// goroutine i over the go-redis clients of group i mod groups, one per
// master, as separate processes would have.
func (s *setup) redsyncLockers(addrs []string, groups int, counted *rounds) []*redsyncLocker {
	pools := make([][]redsyncredis.Pool, groups)
	for g := range pools {
		for _, a := range addrs {
			o := s.options(a)
			o.PoolSize = 2*slices.Max(s.cfg.Concurrency) + 10 // as conn sizes go-redis's pool
			c := redis.NewClient(o)
			s.redsync = append(s.redsync, c)
			pools[g] = append(pools[g], redsyncgoredis.NewPool(c))
		}
	}
	lockers := make([]*redsyncLocker, slices.Max(s.cfg.Concurrency))
	for i := range lockers {
		lockers[i] = newRedsyncLocker(pools[i%groups], counted)
	}
	return lockers
}

// newBar draws progress in attempts when rows are counted, else in time.
func newBar(cfg Config, variants int) *progress.Bar {
	rows := int64(len(cfg.Concurrency) * variants)
	if cfg.Cycles > 0 {
		return progress.Count(cfg.Progress, cfg.Cycles*rows, "cycles")
	}
	return progress.Time(cfg.Progress, cfg.Duration*time.Duration(rows))
}

// tally is what one variant measured at one concurrency.
type tally struct {
	acquire, cycle                                   *hdrhistogram.Histogram
	attempts, acquired, contended, unavailable, errs int64
	firstErr                                         error // the first of errs, for the row
	seconds                                          float64
	mallocs                                          uint64
	cpu                                              time.Duration

	// The contended scenario's: Lock's waits when it won, the handoffs
	// between goroutines, overlapping sections, sections per goroutine, and
	// the clients' attempts (see rounds).
	wait, handoff                   *hdrhistogram.Histogram
	violations                      int64
	sections                        []int64 // per goroutine, begun within the slices
	window                          float64 // seconds of the slices, without what ran on past their end
	rounds, lostRounds, splitRounds int64
}

func newHistogram() *hdrhistogram.Histogram {
	// 1 µs to 10 min, 3 significant figures.
	return hdrhistogram.New(1, 600_000_000, 3)
}

// measure runs every variant at concurrency c, in cfg.Rounds slices that
// alternate between the variants (A, B, A, B ...), so that drift in the
// machine's speed hits all of them alike.
func measure(ctx context.Context, cfg Config, variants []*variant, c int, bar *progress.Bar) ([]report.Row, error) {
	// Only the contended scenario's: the uncontended rows' heap (and so
	// their GC) stays what it was.
	contended := cfg.Scenario == "contended"
	tallies := make([]*tally, len(variants))
	for i := range tallies {
		tallies[i] = newTally(contended, c)
	}
	workers := newWorkers(contended, c)
	fleets := make([]*fleet, len(variants)) // the -procs rows' processes, for this concurrency
	defer func() {
		for _, f := range fleets {
			f.close()
		}
	}()
	for i, v := range variants {
		if v.procs != nil {
			var err error
			if fleets[i], err = startFleet(ctx, v, c); err != nil {
				return nil, err
			}
		}
	}
	for round := range cfg.Rounds {
		for i, v := range variants {
			slice := cfg.Duration / time.Duration(cfg.Rounds)
			budget := int64(0)
			if cfg.Cycles > 0 {
				budget = cfg.Cycles / int64(cfg.Rounds)
				if int64(round) < cfg.Cycles%int64(cfg.Rounds) {
					budget++
				}
			}
			if err := runSlice(ctx, cfg, v, workers, fleets[i], tallies[i], slice, budget, bar); err != nil {
				return nil, err
			}
		}
	}

	rows := make([]report.Row, len(variants))
	type key struct{ driver, label string } // a ratio compares rows of one driver
	p50 := map[key]float64{}
	for i, v := range variants {
		t := tallies[i]
		r := v.row
		r.Concurrency = c
		r.Attempts, r.Cycles, r.Seconds = t.attempts, t.acquired, t.seconds
		if t.seconds > 0 {
			r.OpsPerSec = float64(t.acquired) / t.seconds
		}
		if t.acquire.TotalCount() > 0 {
			r.AcquireP50Us = float64(t.acquire.ValueAtQuantile(50))
			r.AcquireP90Us = float64(t.acquire.ValueAtQuantile(90))
			r.AcquireP99Us = float64(t.acquire.ValueAtQuantile(99))
			r.AcquireP999Us = float64(t.acquire.ValueAtQuantile(99.9))
			r.AcquireMaxUs = float64(t.acquire.Max())
		}
		if t.cycle.TotalCount() > 0 {
			r.CycleP50Us = float64(t.cycle.ValueAtQuantile(50))
		}
		r.Acquired, r.Contended, r.Unavailable, r.Errors = t.acquired, t.contended, t.unavailable, t.errs
		if t.firstErr != nil {
			r.FirstError = t.firstErr.Error()
		}
		if t.attempts > 0 {
			r.AllocsPerOp = float64(t.mallocs) / float64(t.attempts)
		}
		r.CPUSeconds = t.cpu.Seconds()
		if v.guards != nil {
			contendedFigures(&r, t)
		}
		rows[i] = r
		if r.Acquired > 0 {
			// A row that acquired nothing has a p50 of failures: no
			// row's ratio is taken to it.
			p50[key{v.row.Driver, v.label}] = r.AcquireP50Us
		}
	}
	for i, v := range variants {
		if v.ratioTo == "" {
			continue
		}
		rows[i].RatioOf = v.ratioTo
		if d := p50[key{v.row.Driver, v.ratioTo}]; d > 0 && rows[i].Acquired > 0 {
			rows[i].RatioP50 = rows[i].AcquireP50Us / d
		}
	}
	return rows, nil
}

// worker is one goroutine's part of a slice; its histograms are merged
// into the variant's tally after each slice, so workers never share one.
type worker struct {
	id                                               int // its index in the slice's workers
	acquire, cycle                                   *hdrhistogram.Histogram
	attempts, acquired, contended, unavailable, errs int64
	firstErr                                         error // the first of errs in this slice
	rng                                              *rand.Rand
	wait                                             *hdrhistogram.Histogram // contended only
	violations, sections                             int64                   // contended only
}

// newTally is an empty tally; a contended one for c goroutines.
func newTally(contended bool, c int) *tally {
	t := &tally{acquire: newHistogram(), cycle: newHistogram()}
	if contended {
		t.wait, t.handoff, t.sections = newHistogram(), newHistogram(), make([]int64, c)
	}
	return t
}

// newWorkers are the c goroutines of a slice, numbered from 0.
func newWorkers(contended bool, c int) []*worker {
	workers := make([]*worker, c)
	for i := range workers {
		workers[i] = &worker{id: i, acquire: newHistogram(), cycle: newHistogram()}
		if contended {
			workers[i].wait = newHistogram()
		}
	}
	return workers
}

// runSlice measures v for d (or budget attempts), in this process's
// workers or, for a -procs row, in f's processes, into t.
func runSlice(ctx context.Context, cfg Config, v *variant, workers []*worker, f *fleet, t *tally, d time.Duration, budget int64, bar *progress.Bar) error {
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	cpuBefore := cpuTime()
	start := time.Now()
	end := start.Add(d)
	if f != nil {
		if err := f.slice(ctx, end, budget, t, v.guards, bar); err != nil {
			return err
		}
	} else if err := runWorkers(ctx, cfg, v, workers, start, end, budget, bar); err != nil {
		return err
	}
	elapsed := time.Since(start)
	cpu := cpuTime() - cpuBefore
	var after runtime.MemStats
	runtime.ReadMemStats(&after)

	t.seconds += elapsed.Seconds()
	if budget > 0 {
		t.window += elapsed.Seconds()
	} else {
		t.window += d.Seconds()
	}
	t.cpu += cpu
	t.mallocs += after.Mallocs - before.Mallocs
	if f == nil {
		collect(t, workers)
	}
	for _, g := range v.guards {
		if f != nil {
			// Logged by several processes: the wall clock orders the
			// sections, and says which overlapped.
			slices.SortFunc(g.sections, func(a, b section) int { return a.acquired.Compare(b.acquired) })
			t.violations += overlaps(g.sections)
		}
		handoffs(g.sections, func(d time.Duration) { _ = t.handoff.RecordValue(micros(d)) })
		g.sections = g.sections[:0]
	}
	if v.rounds != nil {
		v.rounds.collect(t)
	}
	return ctx.Err()
}

// runWorkers runs v's loop in every worker from start until end (or budget
// attempts) and waits for them.
func runWorkers(ctx context.Context, cfg Config, v *variant, workers []*worker, start, end time.Time, budget int64, bar *progress.Bar) error {
	var left atomic.Int64
	left.Store(budget)
	var invalid atomic.Pointer[error] // the library refused the run's settings
	var wg sync.WaitGroup
	for i, w := range workers {
		w.rng = rand.New(rand.NewPCG(uint64(start.UnixNano()), uint64(i)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch {
			case v.guards != nil:
				w.contend(ctx, cfg, v, end, budget > 0, &left, &invalid, bar)
			case v.raw != nil:
				w.runRaw(ctx, cfg, v, end, budget > 0, &left, &invalid, bar)
			default:
				w.run(ctx, cfg, v, end, budget > 0, &left, &invalid, bar)
			}
		}()
	}
	wg.Wait()
	if err := invalid.Load(); err != nil {
		// Not an outcome to count: no attempt with these settings can succeed.
		return fmt.Errorf("benchrun: %w", *err)
	}
	return nil
}

// collect moves what the workers counted into t, and resets them.
func collect(t *tally, workers []*worker) {
	for _, w := range workers {
		t.acquire.Merge(w.acquire)
		t.cycle.Merge(w.cycle)
		t.attempts += w.attempts
		t.acquired += w.acquired
		t.contended += w.contended
		t.unavailable += w.unavailable
		t.errs += w.errs
		if t.firstErr == nil {
			t.firstErr = w.firstErr
		}
		w.firstErr = nil
		w.acquire.Reset()
		w.cycle.Reset()
		if w.wait != nil {
			t.wait.Merge(w.wait)
			t.violations += w.violations
			t.sections[w.id] += w.sections
			w.wait.Reset()
		}
		w.attempts, w.acquired, w.contended, w.unavailable, w.errs, w.violations, w.sections = 0, 0, 0, 0, 0, 0, 0
	}
}

func (w *worker) run(ctx context.Context, cfg Config, v *variant, end time.Time, counted bool, left *atomic.Int64, invalid *atomic.Pointer[error], bar *progress.Bar) {
	for w.more(ctx, counted, left, end) {
		res := v.resources[w.rng.IntN(len(v.resources))]
		start := time.Now()
		l, err := v.client.TryLock(ctx, res, cfg.TTL)
		w.record(time.Since(start), bar)
		if err != nil {
			if !w.failed(ctx, err, invalid) {
				return
			}
			continue
		}
		if cfg.Hold > 0 {
			critical.Hold(cfg.Hold)
		}
		if err := l.Unlock(ctx); err != nil {
			w.errored(err)
			continue
		}
		_ = w.cycle.RecordValue(micros(time.Since(start)))
		w.acquired++
	}
}

// more reports whether the worker makes another attempt: while the
// slice's budget of attempts lasts (counted), else until end.
func (w *worker) more(ctx context.Context, counted bool, left *atomic.Int64, end time.Time) bool {
	switch {
	case ctx.Err() != nil:
		return false
	case counted:
		return left.Add(-1) >= 0
	}
	return time.Now().Before(end)
}

// record counts one attempt that took d, whatever its outcome.
func (w *worker) record(d time.Duration, bar *progress.Bar) {
	_ = w.acquire.RecordValue(micros(d))
	w.attempts++
	bar.Add(1)
}

// failed counts an attempt that returned err. It returns false when no
// attempt with these settings can succeed, and the worker must stop.
func (w *worker) failed(ctx context.Context, err error, invalid *atomic.Pointer[error]) bool {
	switch {
	case ctx.Err() != nil:
		// Cut short by the run's end: masters that had not answered yet
		// make it ErrQuorumUnavailable, which says nothing of them here.
	case errors.Is(err, redlock.ErrNotAcquired):
		w.contended++
	case errors.Is(err, redlock.ErrQuorumUnavailable), errors.Is(err, redlock.ErrFenceUnavailable):
		w.unavailable++
	case errors.Is(err, redlock.ErrInvalidArgument):
		invalid.CompareAndSwap(nil, &err)
		return false
	default:
		if ctx.Err() == nil {
			w.errored(err)
		}
	}
	return true
}

// errored counts an error that is no outcome of a lock: the row's errors.
func (w *worker) errored(err error) {
	if w.errs == 0 {
		w.firstErr = err
	}
	w.errs++
}

func micros(d time.Duration) int64 {
	if us := d.Microseconds(); us > 0 {
		return us
	}
	return 1
}

// cpuTime is the user and system CPU time of the whole process.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
