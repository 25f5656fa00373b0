package bench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"quorumlock.dev/fence"
	"quorumlock.dev/internal/fencing"
	"quorumlock.dev/internal/pgserver"
	"quorumlock.dev/redlock"
)

// FencingReport is the result of `redlock-bench fencing`: the same jobs run
// once without the fence and once with it.
type FencingReport struct {
	Backend   string `json:"backend"`
	Storage   string `json:"storage"` // memory or postgresql
	PGVersion string `json:"pg_version,omitempty"`
	// CounterDurability is what fence.RedisCounter.CheckDurability said of
	// the fence node: "ok", or why the counter could lose fences.
	CounterDurability string           `json:"counter_durability"`
	Servers           []ServerInfo     `json:"servers"`
	Started           time.Time        `json:"started"`
	GoMaxProcs        int              `json:"gomaxprocs"`
	Config            FencingConfig    `json:"config"`
	Results           []fencing.Result `json:"results"`
}

// FencingConfig repeats the run's settings.
type FencingConfig struct {
	Jobs      int64   `json:"jobs"`
	SKUs      int     `json:"skus"`
	Workers   int     `json:"workers"`
	Masters   int     `json:"masters"`
	TTLms     float64 `json:"ttl_ms"`
	PauseMs   float64 `json:"pause_ms"`
	PauseRate float64 `json:"pause_rate"`
	Seed      uint64  `json:"seed"`
}

type fencingInvocation struct {
	backend BackendConfig
	cfg     fencing.Config
	masters int
	nodeTO  time.Duration
	format  string
	pgDSN   string
}

func parseFencing(args []string, stderr io.Writer) (*fencingInvocation, error) {
	fs := flag.NewFlagSet("redlock-bench fencing", flag.ContinueOnError)
	fs.SetOutput(stderr)
	inv := &fencingInvocation{}
	c := &inv.cfg
	var backend string
	fs.StringVar(&backend, "backend", "embedded", "where the Redis servers come from: embedded or redis-server")
	fs.Int64Var(&c.Jobs, "jobs", 1_000_000, "synthetic allocation jobs (orders) per pass")
	fs.IntVar(&c.SKUs, "skus", 1000, "stock rows; the lock is per SKU")
	fs.IntVar(&c.Workers, "c", 64, "workers taking jobs")
	fs.IntVar(&inv.masters, "masters", 1, "lock masters (1: the single-instance lock the incident review describes)")
	fs.DurationVar(&c.TTL, "ttl", 100*time.Millisecond, "lock TTL, and the queue's redelivery delay")
	fs.DurationVar(&inv.nodeTO, "node-timeout", 20*time.Millisecond, "per-master timeout")
	fs.DurationVar(&c.Pause, "pause", 250*time.Millisecond, "how long a paused holder stops (must outlast -ttl)")
	fs.Float64Var(&c.PauseRate, "pause-rate", 0.003, "fraction of jobs whose first holder pauses past its lease (0.003: the incident review's 0.3% duplicate rate)")
	fs.Uint64Var(&c.Seed, "seed", 1, "picks the paused jobs; both passes pause the same ones")
	fs.DurationVar(&c.Stall, "stall", 0, "stop with an error when no job finishes for this long (0: 20×(ttl+pause), at least 10s)")
	fs.StringVar(&inv.format, "o", "text", "output format: text or json")
	fs.StringVar(&inv.pgDSN, "pg-dsn", "", "store in this PostgreSQL database (tables with a random prefix, dropped afterwards); with -backend redis-server and no -pg-dsn the run starts a throw-away PostgreSQL")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: redlock-bench fencing [flags]\n\nThe incident review's duplicate-write benchmark: duplicate writes over N allocation jobs, without and with the fence enforced by the storage.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, usage(fs, "unexpected argument %q", fs.Arg(0))
	}
	switch backend {
	case "embedded", "redis-server":
	default:
		return nil, usage(fs, "-backend %q: want embedded or redis-server", backend)
	}
	if inv.format != "text" && inv.format != "json" {
		return nil, usage(fs, "-o %q: want text or json", inv.format)
	}
	if inv.masters < 1 || inv.masters > 16 {
		return nil, usage(fs, "-masters %d outside 1..16", inv.masters)
	}
	if inv.nodeTO <= 0 || inv.nodeTO >= c.TTL {
		return nil, usage(fs, "-node-timeout %v must be positive and below -ttl %v", inv.nodeTO, c.TTL)
	}
	c.Stock = c.Jobs + 1 // never runs out: a duplicate must not hide behind an empty shelf
	if err := c.Validate(); err != nil {
		return nil, usage(fs, "%v", err)
	}
	inv.backend = BackendConfig{Kind: backend, Masters: inv.masters}
	return inv, nil
}

// mainFencing is `redlock-bench fencing`.
func mainFencing(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	inv, err := parseFencing(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	if err != nil {
		return ExitUsage
	}
	rep, err := runFencing(ctx, inv)
	if err != nil {
		fmt.Fprintf(stderr, "redlock-bench fencing: %s\n", oneLine(err))
		return ExitError
	}
	if inv.format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = writeFencingText(stdout, rep)
	}
	if err != nil {
		fmt.Fprintf(stderr, "redlock-bench fencing: %s\n", oneLine(err))
		return ExitError
	}
	return ExitOK
}

func runFencing(ctx context.Context, inv *fencingInvocation) (*FencingReport, error) {
	env, err := Open(ctx, inv.backend)
	if err != nil {
		return nil, err
	}
	defer env.Close(context.WithoutCancel(ctx))
	c := inv.cfg
	rep := &FencingReport{
		Backend: env.Backend, Storage: "memory", Servers: env.Servers, Started: time.Now().UTC(),
		GoMaxProcs: runtime.GOMAXPROCS(0),
		Config: FencingConfig{Jobs: c.Jobs, SKUs: c.SKUs, Workers: c.Workers, Masters: inv.masters,
			TTLms: ms(c.TTL), PauseMs: ms(c.Pause), PauseRate: c.PauseRate, Seed: c.Seed},
	}
	var clients []*redis.Client
	defer func() {
		for _, cl := range clients {
			_ = cl.Close()
		}
	}()
	dial := func(addr string) *redis.Client {
		cl := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 2*c.Workers + 10})
		clients = append(clients, cl)
		return cl
	}
	masters := make([]redlock.Master, len(env.Masters))
	for i, a := range env.Masters {
		masters[i] = dial(a)
	}
	counter, err := fence.NewRedisCounter(dial(env.Fence))
	if err != nil {
		return nil, err
	}
	base := []redlock.Option{
		redlock.WithNodeTimeout(inv.nodeTO),
		redlock.WithRetry(0, time.Millisecond, 2*time.Millisecond), // until ctx: every job must be done
	}
	rep.CounterDurability = "ok"
	if err := counter.CheckDurability(ctx); err != nil {
		rep.CounterDurability = oneLine(err)
	}
	newStore, closeStorage, err := openStorage(ctx, inv, env, rep)
	if err != nil {
		return nil, err
	}
	defer closeStorage()
	for _, fenced := range []bool{false, true} {
		opts := base
		if fenced {
			opts = append(append([]redlock.Option(nil), base...), redlock.WithFence(counter))
		}
		client, err := redlock.New(masters, opts...)
		if err != nil {
			return nil, err
		}
		store := newStore()
		res, err := fencing.Run(ctx, c, client, store)
		_ = store.Close()
		if err != nil {
			return nil, err
		}
		rep.Results = append(rep.Results, res)
	}
	return rep, nil
}

// openStorage picks the storage: PostgreSQL when -pg-dsn is given or the
// run starts real servers, memory otherwise.
func openStorage(ctx context.Context, inv *fencingInvocation, env *Env, rep *FencingReport) (func() fencing.Store, func(), error) {
	dsn := inv.pgDSN
	var srv *pgserver.Server
	if dsn == "" && inv.backend.Kind == "redis-server" {
		var err error
		if srv, err = pgserver.Start(ctx, pgserver.Options{}); err != nil {
			return nil, nil, fmt.Errorf("bench: start PostgreSQL: %w", err)
		}
		dsn = srv.DSN("postgres")
	}
	if dsn == "" {
		return func() fencing.Store { return fencing.NewMemoryStore() }, func() {}, nil
	}
	stop := func() {
		if srv != nil {
			_ = srv.Stop()
		}
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("bench: -pg-dsn: %w", err)
	}
	cfg.MaxConns = int32(inv.cfg.Workers + 4)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.QueryRow(ctx, "SHOW server_version").Scan(&rep.PGVersion)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		stop()
		return nil, nil, fmt.Errorf("bench: cannot reach PostgreSQL: %w", err)
	}
	rep.Storage = "postgresql"
	prefix := "quorumlock_bench_" + strings.ReplaceAll(strings.TrimPrefix(env.Prefix, "redlock-bench-"), "-", "_")
	return func() fencing.Store { return fencing.NewPGStore(pool, prefix) }, func() { pool.Close(); stop() }, nil
}

func writeFencingText(w io.Writer, r *FencingReport) error {
	fmt.Fprintf(w, "backend: %s, storage: %s %s, started %s, GOMAXPROCS %d\n", r.Backend, r.Storage, r.PGVersion, r.Started.Format(time.RFC3339), r.GoMaxProcs)
	fmt.Fprintf(w, "fence counter durability: %s\n", r.CounterDurability)
	c := r.Config
	fmt.Fprintf(w, "jobs %d over %d SKUs, %d workers, %d master(s), ttl %v, %.2f%% of holders pause %v\n\n",
		c.Jobs, c.SKUs, c.Workers, c.Masters, time.Duration(c.TTLms*float64(time.Millisecond)), 100*c.PauseRate,
		time.Duration(c.PauseMs*float64(time.Millisecond)))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "mode\tjobs\tpauses\tredelivered\tshipments\torders\tduplicates\trejections\terrors\twall s")
	for _, x := range r.Results {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.1f\n", x.Mode, x.Jobs, x.Pauses, x.Redelivered,
			x.Shipments, x.Orders, x.Duplicates, x.Rejections, x.Errors, x.WallSeconds)
	}
	return tw.Flush()
}
