// Package fencingbench runs `redlock-bench fencing`: the jobs of package
// fencing once without the fence and once with it, on a backend's servers and
// in memory or PostgreSQL, and writes the [Report] as text or JSON.
package fencingbench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"quorumlock.dev/cmd/redlock-bench/internal/allocjobs"
	"quorumlock.dev/cmd/redlock-bench/internal/backend"
	"quorumlock.dev/cmd/redlock-bench/internal/progress"
	"quorumlock.dev/cmd/redlock-bench/internal/report"
	"quorumlock.dev/fence"
	"quorumlock.dev/internal/harness/pgserver"
	"quorumlock.dev/redlock"

	"quorumlock.dev/driver"

	"quorumlock.dev/driver/goredis"
)

// Config is one run: the jobs, the servers and the lock's node timeout.
type Config struct {
	Backend     backend.Config // Kind embedded or redis-server; Masters are the lock's
	Jobs        allocjobs.Config
	NodeTimeout time.Duration
	// PGDSN stores in this PostgreSQL database; "" stores in memory, except
	// that a redis-server backend then starts a throw-away PostgreSQL.
	PGDSN string
	// Progress, when set, gets a line as each pass starts and ends, and in
	// between a bar when Bar is set (Progress is a terminal), else a line
	// every ProgressEvery.
	Progress io.Writer
	Bar      bool
}

// ProgressEvery is how often a pass without a bar says how far it got.
const ProgressEvery = 10 * time.Second

// Report is the result of `redlock-bench fencing`: the same jobs run once
// without the fence and once with it.
type Report struct {
	Backend   string `json:"backend"`
	Storage   string `json:"storage"` // memory or postgresql
	PGVersion string `json:"pg_version,omitempty"`
	// CounterDurability is what fence.RedisCounter.CheckDurability said of
	// the fence node: "ok", or why the counter could lose fences; on the
	// embedded backend, whose miniredis has no CONFIG, that it was not checked.
	CounterDurability string              `json:"counter_durability"`
	Servers           []report.ServerInfo `json:"servers"`
	Started           time.Time           `json:"started"`
	GoMaxProcs        int                 `json:"gomaxprocs"`
	Config            ConfigEcho          `json:"config"`
	Results           []allocjobs.Result  `json:"results"`
}

// ConfigEcho repeats the run's settings.
type ConfigEcho struct {
	Jobs      int64   `json:"jobs"`
	SKUs      int     `json:"skus"`
	Workers   int     `json:"workers"`
	Masters   int     `json:"masters"`
	TTLms     float64 `json:"ttl_ms"`
	PauseMs   float64 `json:"pause_ms"`
	PauseRate float64 `json:"pause_rate"`
	Seed      uint64  `json:"seed"`
}

// Run opens the backend, runs the jobs unfenced and then fenced, and closes
// the backend. PostgreSQL tables it creates carry the run's prefix.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	env, err := backend.Open(ctx, cfg.Backend)
	if err != nil {
		return nil, err
	}
	defer env.Close(context.WithoutCancel(ctx))
	c := cfg.Jobs
	rep := &Report{
		Backend: env.Backend, Storage: "memory", Servers: env.Servers, Started: time.Now().UTC(),
		GoMaxProcs: runtime.GOMAXPROCS(0),
		Config: ConfigEcho{Jobs: c.Jobs, SKUs: c.SKUs, Workers: c.Workers, Masters: cfg.Backend.Masters,
			TTLms: report.Milliseconds(c.TTL), PauseMs: report.Milliseconds(c.Pause), PauseRate: c.PauseRate, Seed: c.Seed},
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
	masters := make([]driver.Conn, len(env.Masters))
	for i, a := range env.Masters {
		masters[i] = goredis.Conn(dial(a))
	}
	counter, err := fence.NewRedisCounter(goredis.Conn(dial(env.Fence)))
	if err != nil {
		return nil, err
	}
	base := []redlock.Option{
		redlock.WithNodeTimeout(cfg.NodeTimeout),
		redlock.WithRetry(0, time.Millisecond, 2*time.Millisecond), // until ctx: every job must be done
	}
	rep.CounterDurability = "ok"
	if env.InProcess {
		// miniredis answers CONFIG with "unknown command": checking would
		// only print that. It keeps nothing past the run in any case.
		rep.CounterDurability = embeddedDurability
	} else if err := counter.CheckDurability(ctx); err != nil {
		rep.CounterDurability, _, _ = strings.Cut(err.Error(), "\n")
	}
	newStore, closeStorage, err := openStorage(ctx, cfg, env, rep)
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
		mode := "unfenced"
		if fenced {
			mode = "fenced"
		}
		jobs := c
		p := cfg.startPass(mode, c.Jobs)
		jobs.Done = p.done
		res, err := allocjobs.Run(ctx, jobs, client, store)
		p.finish(res, err)
		_ = store.Close()
		if err != nil {
			return nil, err
		}
		rep.Results = append(rep.Results, res)
	}
	return rep, nil
}

// embeddedDurability is the embedded backend's counter_durability.
const embeddedDurability = "not checked: the embedded backend's counter is an in-process miniredis, which keeps nothing past the run and has no settings to read"

// pass reports one pass's progress to Config.Progress.
type pass struct {
	w     io.Writer
	mode  string
	jobs  int64
	start time.Time
	count atomic.Int64
	bar   *progress.Bar
	stop  chan struct{}
	ended sync.WaitGroup
}

func (cfg Config) startPass(mode string, jobs int64) *pass {
	p := &pass{w: cfg.Progress, mode: mode, jobs: jobs, start: time.Now()}
	if p.w == nil {
		return p
	}
	fmt.Fprintf(p.w, "fencing: %s pass: %d jobs\n", mode, jobs)
	if cfg.Bar {
		p.bar = progress.Count(p.w, jobs, "jobs")
		return p
	}
	p.stop = make(chan struct{})
	p.ended.Add(1)
	go p.tell()
	return p
}

// done counts a job; safe from any worker.
func (p *pass) done() {
	p.count.Add(1)
	p.bar.Add(1)
}

// tell writes how far the pass got every ProgressEvery, until finish.
func (p *pass) tell() {
	defer p.ended.Done()
	t := time.NewTicker(ProgressEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			fmt.Fprintf(p.w, "fencing: %s pass: %d of %d jobs, %.0f s\n", p.mode, p.count.Load(), p.jobs, time.Since(p.start).Seconds())
		case <-p.stop:
			return
		}
	}
}

func (p *pass) finish(res allocjobs.Result, err error) {
	if p.w == nil {
		return
	}
	p.bar.Finish()
	if p.stop != nil {
		close(p.stop)
		p.ended.Wait()
	}
	if err != nil {
		return // the caller says why
	}
	fmt.Fprintf(p.w, "fencing: %s pass done in %.0f s: %d duplicates, %d rejected writes, %d errors\n",
		p.mode, time.Since(p.start).Seconds(), res.Duplicates, res.Rejections, res.Errors)
}

// openStorage picks the storage: PostgreSQL when -pg-dsn is given or the
// run starts real servers, memory otherwise.
func openStorage(ctx context.Context, cfg Config, env *backend.Env, rep *Report) (func() allocjobs.Store, func(), error) {
	dsn := cfg.PGDSN
	var srv *pgserver.Server
	if dsn == "" && cfg.Backend.Kind == "redis-server" {
		var err error
		if srv, err = pgserver.Start(ctx, pgserver.Options{}); err != nil {
			return nil, nil, fmt.Errorf("fencingbench: start PostgreSQL: %w", err)
		}
		dsn = srv.DSN("postgres")
	}
	if dsn == "" {
		return func() allocjobs.Store { return allocjobs.NewMemoryStore() }, func() {}, nil
	}
	stop := func() {
		if srv != nil {
			_ = srv.Stop()
		}
	}
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("fencingbench: -pg-dsn: %w", err)
	}
	pcfg.MaxConns = int32(cfg.Jobs.Workers + 4)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err == nil {
		err = pool.QueryRow(ctx, "SHOW server_version").Scan(&rep.PGVersion)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		stop()
		return nil, nil, fmt.Errorf("fencingbench: cannot reach PostgreSQL: %w", err)
	}
	rep.Storage = "postgresql"
	prefix := "quorumlock_bench_" + strings.ReplaceAll(strings.TrimPrefix(env.Prefix, "redlock-bench-"), "-", "_")
	return func() allocjobs.Store { return allocjobs.NewPGStore(pool, prefix) }, func() { pool.Close(); stop() }, nil
}

// Write writes r to w as "text", a table for people, or "json", one
// indented object.
func Write(w io.Writer, r *Report, format string) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	return writeText(w, r)
}

func writeText(w io.Writer, r *Report) error {
	storage := r.Storage
	if r.PGVersion != "" {
		storage += " " + r.PGVersion
	}
	fmt.Fprintf(w, "backend: %s, storage: %s, started %s, GOMAXPROCS %d\n", r.Backend, storage, r.Started.Format(time.RFC3339), r.GoMaxProcs)
	fmt.Fprintf(w, "fence counter durability: %s\n", r.CounterDurability)
	c := r.Config
	fmt.Fprintf(w, "jobs %d over %d SKUs, %d workers, %d master(s), ttl %v, %.2f%% of holders pause %v\n\n",
		c.Jobs, c.SKUs, c.Workers, c.Masters, report.Duration(c.TTLms), 100*c.PauseRate,
		report.Duration(c.PauseMs))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "mode\tjobs\tpauses\tredelivered\tshipments\torders\tduplicates\trejections\terrors\twall s")
	for _, x := range r.Results {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.1f\n", x.Mode, x.Jobs, x.Pauses, x.Redelivered,
			x.Shipments, x.Orders, x.Duplicates, x.Rejections, x.Errors, x.WallSeconds)
	}
	return tw.Flush()
}
