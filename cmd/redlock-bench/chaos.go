package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"quorumlock.dev/cmd/redlock-bench/internal/chaos"
	"quorumlock.dev/cmd/redlock-bench/internal/chaosstore"
	"quorumlock.dev/cmd/redlock-bench/internal/output"
	"quorumlock.dev/internal/harness/mariadbserver"
	"quorumlock.dev/internal/harness/pgserver"
)

// chaosInvocation is a parsed `redlock-bench chaos` command line.
type chaosInvocation struct {
	cfg     chaos.Config
	format  string
	json    string   // also write the rows as JSON to this file
	store   string   // memory, postgres, mysql or sqlite
	secrets []string // the passwords of -pg-dsn and -mysql-dsn, kept out of every message
}

func parseChaos(args []string, stderr io.Writer) (*chaosInvocation, error) {
	fs := flag.NewFlagSet("redlock-bench chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	inv := &chaosInvocation{}
	c := &inv.cfg
	var names string
	fs.StringVar(&names, "scenario", "", "scenarios to run, comma-separated (default: all)")
	fs.IntVar(&c.Runs, "runs", 0, "runs of each scenario (default 5, or 1 with -quick)")
	fs.BoolVar(&c.Quick, "quick", false, "the small size the test suite runs")
	fs.IntVar(&c.Workers, "workers", 0, "worker processes (default 4, or 3 with -quick)")
	fs.DurationVar(&c.TTL, "ttl", 0, "lock TTL (default 2s, or 1s with -quick)")
	fs.DurationVar(&c.NodeTimeout, "node-timeout", 0, "per-master timeout (default 50ms)")
	fs.DurationVar(&c.Retry, "retry", 0, "a worker's longest pause after a lost attempt (default 20ms)")
	fs.StringVar(&inv.format, "o", "text", "output format: text, json or csv")
	fs.StringVar(&inv.json, "json", "", "also write the rows as JSON to this file")
	var pgDSN, mysqlDSN, sqliteFile string
	fs.StringVar(&inv.store, "store", "memory", "the fenced store: memory (in this process, served to the workers), postgres (tables guarded by pgfence), mysql (MySQL or MariaDB tables guarded by sqlfence) or sqlite (a file's tables guarded by sqlfence)")
	fs.StringVar(&pgDSN, "pg-dsn", "", "with -store postgres: this database, postgres://user@host:port/db?sslmode=verify-full or key=value (tables with a prefix of their own, dropped afterwards; the password from PGPASSWORD or ~/.pgpass keeps it out of the command line); empty: a throw-away PostgreSQL the run starts")
	fs.StringVar(&mysqlDSN, "mysql-dsn", "", "with -store mysql: this database, user@tcp(host:port)/db as github.com/go-sql-driver/mysql reads it (tables with a prefix of their own, dropped afterwards; a password from MYSQL_PWD keeps it out of the command line); empty: a throw-away MariaDB the run starts")
	fs.StringVar(&sqliteFile, "sqlite-file", "", "with -store sqlite: this database file (tables with a prefix of their own, dropped afterwards); empty: a file in a temporary dir of each run's own")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: redlock-bench chaos [flags]\n\n"+
			"Each known way a Redis lock fails, injected on real redis-server processes with worker\n"+
			"processes writing through a fenced store; one row per scenario (columns: docs/chaos.md).\n"+
			"Exit status 1 when a scenario's invariants did not hold.\n\nScenarios:\n%s\n", chaos.About())
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, usage(fs, "unexpected argument %q", fs.Arg(0))
	}
	c.Scenarios = splitList(names)
	for _, n := range c.Scenarios {
		if !slices.Contains(chaos.Names(), n) {
			return nil, usage(fs, "unknown scenario %q", n)
		}
	}
	if !slices.Contains(output.Formats, inv.format) {
		return nil, usage(fs, "-o %q: want one of %v", inv.format, output.Formats)
	}
	switch {
	case !slices.Contains([]string{chaosstore.Memory, chaosstore.Postgres, chaosstore.MySQL, chaosstore.SQLite}, inv.store):
		return nil, usage(fs, "-store %q: want memory, postgres, mysql or sqlite", inv.store)
	case pgDSN != "" && inv.store != chaosstore.Postgres:
		return nil, usage(fs, "-pg-dsn needs -store postgres")
	case mysqlDSN != "" && inv.store != chaosstore.MySQL:
		return nil, usage(fs, "-mysql-dsn needs -store mysql")
	case sqliteFile != "" && inv.store != chaosstore.SQLite:
		return nil, usage(fs, "-sqlite-file needs -store sqlite")
	}
	pg, err := pgPassword(fs, pgDSN)
	if err != nil {
		return nil, err
	}
	my, err := mysqlPassword(fs, &mysqlDSN)
	if err != nil {
		return nil, err
	}
	inv.secrets = []string{pg, my}
	c.Store = chaosstore.Spec{Kind: inv.store, DSN: pgDSN + mysqlDSN + sqliteFile} // one of them at most
	// What chaos.Run would refuse, refused before a store's server starts.
	if err := chaos.Check(*c); err != nil {
		return nil, usage(fs, "%s", strings.TrimPrefix(err.Error(), chaos.ErrConfig.Error()+": "))
	}
	return inv, nil
}

// runChaos is `redlock-bench chaos`: parse, run, write; exit 1 if a row did not hold.
func runChaos(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	inv, err := parseChaos(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return exitUsage
	}
	inv.cfg.Progress = stderr
	if inv.cfg.Store.DSN == "" && (inv.store == chaosstore.Postgres || inv.store == chaosstore.MySQL) {
		dsn, stop, err := startStoreServer(ctx, inv.store)
		if err != nil {
			fmt.Fprintf(stderr, "redlock-bench chaos: %s\n", oneLine(err))
			return exitError
		}
		defer stop()
		inv.cfg.Store.DSN = dsn
	}
	start := time.Now()
	rows, err := chaos.Run(ctx, inv.cfg)
	for i := range rows {
		rows[i].Problems = redactSecrets(rows[i].Problems, inv.secrets...) // a store's error may quote its DSN
	}
	if err == nil || len(rows) > 0 {
		if werr := writeChaos(stdout, rows, inv.format); werr != nil && err == nil {
			err = werr
		}
		if inv.json != "" {
			if werr := writeChaosFile(inv.json, rows); werr != nil && err == nil {
				err = werr
			}
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "redlock-bench chaos: %s\n", redactSecrets(strings.TrimPrefix(oneLine(err), "chaos: "), inv.secrets...))
		if errors.Is(err, chaos.ErrConfig) {
			return exitUsage
		}
		return exitError
	}
	failed := 0
	for _, r := range rows {
		if !r.Held {
			failed++
		}
	}
	fmt.Fprintf(stderr, "redlock-bench chaos: %d scenarios in %v, %d failed\n", len(rows), time.Since(start).Round(time.Second), failed)
	if failed > 0 {
		return exitError
	}
	return exitOK
}

// startStoreServer starts a throw-away PostgreSQL or MariaDB for the chaos store, and
// returns its DSN and what stops it.
func startStoreServer(ctx context.Context, kind string) (string, func(), error) {
	if kind == chaosstore.Postgres {
		srv, err := pgserver.Start(ctx, pgserver.Options{})
		if err != nil {
			return "", nil, err
		}
		return srv.DSN("postgres"), func() { _ = srv.Stop() }, nil
	}
	srv, err := mariadbserver.Start(ctx, mariadbserver.Options{})
	if err != nil {
		return "", nil, err
	}
	if err := srv.CreateDatabase(ctx, "quorumlock_chaos"); err != nil {
		_ = srv.Stop()
		return "", nil, err
	}
	return srv.DSN("quorumlock_chaos"), func() { _ = srv.Stop() }, nil
}

func writeChaosFile(path string, rows []chaos.Row) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := writeChaos(f, rows, "json"); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeChaos writes rows as text (the columns a reader needs first), JSON or CSV (every
// field, named by its json tag).
func writeChaos(w io.Writer, rows []chaos.Row, format string) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	case "csv":
		return output.WriteRowsCSV(w, rows)
	default:
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "scenario\tvariant\truns\tlocks\toverlaps\tstale\trejected\tfenced dup\tunfenced dup\tlost\tunavail\tp50 ms\trecovery ms\tfailover ms p50/p99/max\tfault\theld\t")
		for _, r := range rows {
			failover := "-"
			if r.Failovers > 0 {
				failover = fmt.Sprintf("%.1f/%.1f/%.1f", r.FailoverP50Ms, r.FailoverP99Ms, r.FailoverMaxMs)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.2f\t%.0f\t%s\t%v\t%v\t\n",
				r.Scenario, r.Variant, r.Runs, r.Acquisitions, r.LockOverlaps, r.StaleWrites, r.StaleWritesRejected,
				r.FencedDuplicates, r.UnfencedDuplicates, r.LostWrites, r.Unavailable, r.AcquireP50Ms, r.RecoveryMs,
				failover, r.FaultInjected, r.Held)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, r := range rows {
			if !r.Held {
				fmt.Fprintf(w, "%s: %s\n", r.Scenario, r.Problems)
			}
		}
		return nil
	}
}
