package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"quorumlock.dev/cmd/redlock-bench/internal/backend"
	"quorumlock.dev/cmd/redlock-bench/internal/fencingbench"
)

// fencingInvocation is a parsed `redlock-bench fencing` command line.
type fencingInvocation struct {
	cfg     fencingbench.Config
	format  string   // text or json
	secrets []string // the databases' passwords, kept out of every message
}

// parseFencing reads the fencing subcommand's flags; errors mean exit status 2.
func parseFencing(args []string, stderr io.Writer) (*fencingInvocation, error) {
	fs := flag.NewFlagSet("redlock-bench fencing", flag.ContinueOnError)
	fs.SetOutput(stderr)
	inv := &fencingInvocation{}
	c := &inv.cfg.Jobs
	var kind string
	var masters int
	fs.StringVar(&kind, "backend", "embedded", "where the Redis servers come from: embedded or redis-server")
	fs.Int64Var(&c.Jobs, "jobs", 1_000_000, "synthetic allocation jobs (orders) per pass")
	fs.IntVar(&c.SKUs, "skus", 1000, "stock rows; the lock is per SKU")
	fs.IntVar(&c.Workers, "c", 64, "workers taking jobs")
	fs.IntVar(&masters, "masters", 1, "lock masters (1: the single-instance lock the incident review describes)")
	fs.DurationVar(&c.TTL, "ttl", 100*time.Millisecond, "lock TTL, and the queue's redelivery delay")
	fs.DurationVar(&inv.cfg.NodeTimeout, "node-timeout", 20*time.Millisecond, "per-master timeout")
	fs.DurationVar(&c.Pause, "pause", 250*time.Millisecond, "how long a paused holder stops (must outlast -ttl)")
	fs.Float64Var(&c.PauseRate, "pause-rate", 0.003, "fraction of jobs whose first holder pauses past its lease (0.003: the incident review's 0.3% duplicate rate)")
	fs.Uint64Var(&c.Seed, "seed", 1, "picks the paused jobs; both passes pause the same ones")
	fs.DurationVar(&c.Stall, "stall", 0, "stop with an error when no job finishes for this long (0: 20×(ttl+pause), at least 10s)")
	fs.StringVar(&inv.format, "o", "text", "output format: text or json")
	fs.StringVar(&inv.cfg.Store, "store", "", "where the jobs write: memory, postgres (guarded by pgfence), mysql (MySQL or MariaDB, guarded by sqlfence) or sqlite (guarded by sqlfence) (default: postgres with -pg-dsn or -backend redis-server, else memory)")
	fs.StringVar(&inv.cfg.PGDSN, "pg-dsn", "", "store in this PostgreSQL database, postgres://user@host:port/db?sslmode=verify-full or key=value (tables with a random prefix, dropped afterwards; the password from PGPASSWORD or ~/.pgpass keeps it out of the command line); with -backend redis-server and no -pg-dsn the run starts a throw-away PostgreSQL")
	fs.StringVar(&inv.cfg.MySQLDSN, "mysql-dsn", "", "with -store mysql: this MySQL or MariaDB database, user@tcp(host:port)/db as github.com/go-sql-driver/mysql reads it (tables with a random prefix, dropped afterwards; a password from MYSQL_PWD keeps it out of the command line); with -backend redis-server and no -mysql-dsn the run starts a throw-away MariaDB")
	fs.StringVar(&inv.cfg.SQLiteFile, "sqlite-file", "", "with -store sqlite: this database file (tables with a random prefix, dropped afterwards); default: a file in a temporary dir, removed afterwards")
	fs.IntVar(&inv.cfg.CostSamples, "cost-samples", 2000, "after the passes, time this many jobs' calls to the store without and with the fence, one at a time (0: none)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: redlock-bench fencing [flags]\n\nThe incident review's duplicate-write benchmark: duplicate writes over N allocation jobs, without and with the fence enforced by the storage, and the fence's cost per call to that storage.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, usage(fs, "unexpected argument %q", fs.Arg(0))
	}
	switch kind {
	case "embedded", "redis-server":
	default:
		return nil, usage(fs, "-backend %q: want embedded or redis-server", kind)
	}
	if inv.format != "text" && inv.format != "json" {
		return nil, usage(fs, "-o %q: want text or json", inv.format)
	}
	if masters < 1 || masters > 16 {
		return nil, usage(fs, "-masters %d outside 1..16", masters)
	}
	if nt := inv.cfg.NodeTimeout; nt <= 0 || nt >= c.TTL {
		return nil, usage(fs, "-node-timeout %v must be positive and below -ttl %v", nt, c.TTL)
	}
	c.Stock = c.Jobs + 1 // never runs out: a duplicate must not hide behind an empty shelf
	if err := c.Validate(); err != nil {
		return nil, usage(fs, "%v", err)
	}
	if inv.cfg.Store == "" {
		// A DSN or file names its store.
		switch {
		case inv.cfg.MySQLDSN != "":
			inv.cfg.Store = fencingbench.StoreMySQL
		case inv.cfg.SQLiteFile != "":
			inv.cfg.Store = fencingbench.StoreSQLite
		}
	}
	inv.cfg.Backend = backend.Config{Kind: kind, Masters: masters}
	if err := inv.cfg.Validate(); err != nil {
		return nil, usage(fs, "%s", strings.TrimPrefix(err.Error(), fencingbench.ErrConfig.Error()+": "))
	}
	pg, err := pgPassword(fs, inv.cfg.PGDSN)
	if err != nil {
		return nil, err
	}
	my, err := mysqlPassword(fs, &inv.cfg.MySQLDSN)
	if err != nil {
		return nil, err
	}
	inv.secrets = []string{pg, my}
	return inv, nil
}

// mysqlPassword returns the password of the go-sql-driver/mysql DSN *dsn, after taking it
// from MYSQL_PWD into *dsn when the DSN has none.
func mysqlPassword(fs *flag.FlagSet, dsn *string) (string, error) {
	if *dsn == "" {
		return "", nil
	}
	cfg, err := mysql.ParseDSN(*dsn)
	if err != nil {
		// The driver's message may quote the DSN, and a password with it.
		return "", usage(fs, "-mysql-dsn is not a github.com/go-sql-driver/mysql DSN, user@tcp(host:port)/db")
	}
	if cfg.Passwd == "" && os.Getenv("MYSQL_PWD") != "" {
		cfg.Passwd = os.Getenv("MYSQL_PWD")
		*dsn = cfg.FormatDSN()
	}
	return cfg.Passwd, nil
}

// runFencing is `redlock-bench fencing`: parse, run, write.
func runFencing(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	inv, err := parseFencing(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return exitUsage
	}
	// A pass of a million jobs takes minutes: say how far it got, with a bar
	// on a terminal and a line now and then elsewhere.
	inv.cfg.Progress, inv.cfg.Bar = stderr, isTerminal(stderr)
	rep, err := fencingbench.Run(ctx, inv.cfg)
	if err == nil {
		err = fencingbench.Write(stdout, rep, inv.format)
	}
	if err != nil {
		fmt.Fprintf(stderr, "redlock-bench fencing: %s\n", redactSecrets(oneLine(err), inv.secrets...))
		return exitError
	}
	return exitOK
}
