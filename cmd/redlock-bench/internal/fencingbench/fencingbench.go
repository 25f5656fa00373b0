// Package fencingbench runs `redlock-bench fencing`: the jobs of package
// allocjobs once without the fence and once with it, on a backend's servers and
// in memory, PostgreSQL, MySQL (or MariaDB) or SQLite, times the fence's cost per
// call to that store, and writes the [Report] as text or JSON.
package fencingbench

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite" // "sqlite" of database/sql

	"quorumlock.dev/cmd/redlock-bench/internal/allocjobs"
	"quorumlock.dev/cmd/redlock-bench/internal/backend"
	"quorumlock.dev/cmd/redlock-bench/internal/progress"
	"quorumlock.dev/cmd/redlock-bench/internal/report"
	"quorumlock.dev/fence"
	"quorumlock.dev/fence/sqlfence"
	"quorumlock.dev/internal/harness/mariadbserver"
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
	// Store is where the jobs write: StoreMemory, StorePostgres, StoreMySQL or
	// StoreSQLite; "" is StorePostgres when PGDSN is set or the backend is
	// redis-server, else StoreMemory.
	Store string
	// PGDSN is the PostgreSQL database of StorePostgres, and MySQLDSN (a
	// github.com/go-sql-driver/mysql DSN) the MySQL or MariaDB database of
	// StoreMySQL; "" starts a throw-away server, which only the redis-server
	// backend does.
	PGDSN, MySQLDSN string
	// SQLiteFile is the database file of StoreSQLite; "" is a file in a
	// temporary dir that Run removes.
	SQLiteFile string
	// CostSamples is how many jobs' calls MeasureCost times after the passes,
	// on a fresh store; 0 measures nothing.
	CostSamples int
	// Progress, when set, gets a line as each pass starts and ends, and in
	// between a bar when Bar is set (Progress is a terminal), else a line
	// every ProgressEvery.
	Progress io.Writer
	Bar      bool
}

// The stores of Config.Store.
const (
	StoreMemory   = "memory"
	StorePostgres = "postgres"
	StoreMySQL    = "mysql"
	StoreSQLite   = "sqlite"
)

// Stores are the values of Config.Store, in the order the CLI lists them.
var Stores = []string{StoreMemory, StorePostgres, StoreMySQL, StoreSQLite}

// ErrConfig marks a Config that Run refuses.
var ErrConfig = errors.New("fencingbench: bad configuration")

// store is the store cfg runs on.
func (cfg Config) store() string {
	switch {
	case cfg.Store != "":
		return cfg.Store
	case cfg.PGDSN != "" || cfg.Backend.Kind == "redis-server":
		return StorePostgres
	}
	return StoreMemory
}

// Validate reports a store setting that cannot make a run, as ErrConfig.
func (cfg Config) Validate() error {
	store := cfg.store()
	switch {
	case !slices.Contains(Stores, store):
		return fmt.Errorf("%w: store %q: want one of %s", ErrConfig, store, strings.Join(Stores, ", "))
	case cfg.PGDSN != "" && store != StorePostgres:
		return fmt.Errorf("%w: a PostgreSQL DSN with store %s", ErrConfig, store)
	case cfg.MySQLDSN != "" && store != StoreMySQL:
		return fmt.Errorf("%w: a MySQL DSN with store %s", ErrConfig, store)
	case cfg.SQLiteFile != "" && store != StoreSQLite:
		return fmt.Errorf("%w: an SQLite file with store %s", ErrConfig, store)
	case store == StorePostgres && cfg.PGDSN == "" && cfg.Backend.Kind != "redis-server",
		store == StoreMySQL && cfg.MySQLDSN == "" && cfg.Backend.Kind != "redis-server":
		return fmt.Errorf("%w: store %s needs its DSN, or the redis-server backend, which starts a throw-away server", ErrConfig, store)
	case cfg.CostSamples < 0:
		return fmt.Errorf("%w: %d cost samples", ErrConfig, cfg.CostSamples)
	}
	return nil
}

// ProgressEvery is how often a pass without a bar says how far it got.
const ProgressEvery = 10 * time.Second

// Report is the result of `redlock-bench fencing`: the same jobs run once
// without the fence and once with it.
type Report struct {
	Backend   string `json:"backend"`
	Storage   string `json:"storage"` // memory, postgresql, mysql or sqlite
	PGVersion string `json:"pg_version,omitempty"`
	// StorageVersion is the database server's (or SQLite's) version; none in memory.
	StorageVersion string `json:"storage_version,omitempty"`
	// CounterDurability is what fence.RedisCounter.CheckDurability said of
	// the fence node: "ok", or why the counter could lose fences; on the
	// embedded backend, whose miniredis has no CONFIG, that it was not checked.
	CounterDurability string              `json:"counter_durability"`
	Servers           []report.ServerInfo `json:"servers"`
	Started           time.Time           `json:"started"`
	GoMaxProcs        int                 `json:"gomaxprocs"`
	Config            ConfigEcho          `json:"config"`
	Results           []allocjobs.Result  `json:"results"`
	// GuardCost is the fence's cost per call to the same store, measured
	// after the passes on a fresh one; absent when Config.CostSamples is 0.
	GuardCost *allocjobs.Cost `json:"guard_cost,omitempty"`
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
// the backend. Database tables it creates carry the run's prefix, and each
// pass's store drops its own.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
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
	if cfg.CostSamples > 0 {
		store := newStore()
		cost, err := allocjobs.MeasureCost(ctx, store, c.SKUs, cfg.CostSamples)
		_ = store.Close()
		if err != nil {
			return nil, err
		}
		rep.GuardCost = &cost
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

// openStorage opens the store cfg names, starting a throw-away server where
// it must, and returns a maker of the passes' stores and what closes it all.
func openStorage(ctx context.Context, cfg Config, env *backend.Env, rep *Report) (func() allocjobs.Store, func(), error) {
	// Table names of the run's own: ASCII letters, digits and _, as sqlfence wants.
	prefix := "quorumlock_bench_" + strings.ReplaceAll(strings.TrimPrefix(env.Prefix, "redlock-bench-"), "-", "_")
	rep.Storage = cfg.store()
	switch rep.Storage {
	case StorePostgres:
		rep.Storage = "postgresql"
		return openPostgres(ctx, cfg, prefix, rep)
	case StoreMySQL:
		return openMySQL(ctx, cfg, prefix, rep)
	case StoreSQLite:
		return openSQLite(ctx, cfg, prefix, rep)
	}
	return func() allocjobs.Store { return allocjobs.NewMemoryStore() }, func() {}, nil
}

func openPostgres(ctx context.Context, cfg Config, prefix string, rep *Report) (func() allocjobs.Store, func(), error) {
	dsn := cfg.PGDSN
	stop := func() {}
	if dsn == "" {
		// Autovacuum, as a production server has it: a million jobs grow the shipments
		// table for minutes (see pgserver.Options.Autovacuum).
		srv, err := pgserver.Start(ctx, pgserver.Options{Autovacuum: true})
		if err != nil {
			return nil, nil, fmt.Errorf("fencingbench: start PostgreSQL: %w", err)
		}
		stop = func() { _ = srv.Stop() }
		dsn = srv.DSN("postgres")
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
	rep.StorageVersion = rep.PGVersion
	return func() allocjobs.Store { return allocjobs.NewPGStore(pool, prefix) }, func() { pool.Close(); stop() }, nil
}

// mysqlDatabase is the database the run creates on a throw-away MariaDB.
const mysqlDatabase = "quorumlock_bench"

func openMySQL(ctx context.Context, cfg Config, prefix string, rep *Report) (func() allocjobs.Store, func(), error) {
	dsn := cfg.MySQLDSN
	stop := func() {}
	if dsn == "" {
		srv, err := mariadbserver.Start(ctx, mariadbserver.Options{})
		if err == nil {
			if err = srv.CreateDatabase(ctx, mysqlDatabase); err != nil {
				_ = srv.Stop()
			}
		}
		if err != nil {
			return nil, nil, fmt.Errorf("fencingbench: start MariaDB: %w", err)
		}
		stop = func() { _ = srv.Stop() }
		dsn = srv.DSN(mysqlDatabase)
	}
	mcfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		stop()
		// The driver's message may quote the DSN, and with it a password.
		return nil, nil, fmt.Errorf("fencingbench: -mysql-dsn is not a github.com/go-sql-driver/mysql DSN (user:password@tcp(host:port)/db)")
	}
	connector, err := mysql.NewConnector(mcfg)
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("fencingbench: -mysql-dsn: %w", err)
	}
	db := sql.OpenDB(connector)
	// As many connections as workers, kept: the default of 2 idle ones would
	// dial and close a connection for most calls.
	db.SetMaxOpenConns(cfg.Jobs.Workers + 4)
	db.SetMaxIdleConns(cfg.Jobs.Workers + 4)
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&rep.StorageVersion); err != nil {
		_ = db.Close()
		stop()
		return nil, nil, fmt.Errorf("fencingbench: cannot reach MySQL: %w", err)
	}
	return func() allocjobs.Store { return allocjobs.NewSQLStore(db, sqlfence.MySQL, prefix) },
		func() { _ = db.Close(); stop() }, nil
}

func openSQLite(ctx context.Context, cfg Config, prefix string, rep *Report) (func() allocjobs.Store, func(), error) {
	path := cfg.SQLiteFile
	remove := func() {}
	if path == "" {
		dir, err := os.MkdirTemp("", "redlock-bench-sqlite-")
		if err != nil {
			return nil, nil, fmt.Errorf("fencingbench: SQLite: %w", err)
		}
		remove = func() { _ = os.RemoveAll(dir) }
		path = filepath.Join(dir, "fencing.db")
	}
	db, err := sql.Open("sqlite", SQLiteDSN(path))
	if err != nil {
		remove()
		return nil, nil, fmt.Errorf("fencingbench: SQLite: %w", err)
	}
	// One connection: SQLite writes one transaction at a time, and writers on
	// several connections would wait in its busy handler, which sleeps
	// milliseconds at a time.
	db.SetMaxOpenConns(1)
	if err := db.QueryRowContext(ctx, "SELECT sqlite_version()").Scan(&rep.StorageVersion); err != nil {
		_ = db.Close()
		remove()
		return nil, nil, fmt.Errorf("fencingbench: SQLite %s: %w", path, err)
	}
	return func() allocjobs.Store { return allocjobs.NewSQLStore(db, sqlfence.SQLite, prefix) },
		func() { _ = db.Close(); remove() }, nil
}

// SQLiteDSN is the modernc.org/sqlite DSN the run opens path with: WAL with synchronous
// NORMAL (a commit survives the process's crash, not the machine's), and a busy timeout for
// other processes on the file.
func SQLiteDSN(path string) string {
	return "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)"
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
	if v := cmp.Or(r.StorageVersion, r.PGVersion); v != "" {
		storage += " " + v
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
	if err := tw.Flush(); err != nil {
		return err
	}
	if g := r.GuardCost; g != nil {
		fmt.Fprintf(w, "\nthe fence's cost per call, %d jobs' calls of each kind, one at a time, on a fresh %s store:\n", g.Samples, r.Storage)
		fmt.Fprintln(tw, "call\tunguarded p50 µs\tp99 µs\tper s\tguarded p50 µs\tp99 µs\tper s")
		for _, c := range []struct {
			name string
			pair allocjobs.CostPair
		}{{"read (guarded: claim, then read)", g.Claim}, {"write", g.Write}} {
			u, f := c.pair.Unguarded, c.pair.Guarded
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f\t%s\t%s\t%.0f\n", c.name, micros(u.P50us), micros(u.P99us), u.PerSecond, micros(f.P50us), micros(f.P99us), f.PerSecond)
		}
		return tw.Flush()
	}
	return nil
}

// micros formats µs with three significant digits at most: the memory store's calls take
// less than one.
func micros(us float64) string {
	switch {
	case us < 1:
		return fmt.Sprintf("%.3f", us)
	case us < 10:
		return fmt.Sprintf("%.2f", us)
	case us < 100:
		return fmt.Sprintf("%.1f", us)
	}
	return fmt.Sprintf("%.0f", us)
}
