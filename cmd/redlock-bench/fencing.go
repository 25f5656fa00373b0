package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"quorumlock.dev/cmd/redlock-bench/internal/backend"
	"quorumlock.dev/cmd/redlock-bench/internal/fencingbench"
)

// fencingInvocation is a parsed `redlock-bench fencing` command line.
type fencingInvocation struct {
	cfg    fencingbench.Config
	format string // text or json
	secret string // the PostgreSQL password, kept out of every message
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
	fs.StringVar(&inv.cfg.PGDSN, "pg-dsn", "", "store in this PostgreSQL database, postgres://user@host:port/db or key=value (tables with a random prefix, dropped afterwards; the password from PGPASSWORD or ~/.pgpass keeps it out of the command line); with -backend redis-server and no -pg-dsn the run starts a throw-away PostgreSQL")
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
	var err error
	if inv.secret, err = pgPassword(fs, inv.cfg.PGDSN); err != nil {
		return nil, err
	}
	inv.cfg.Backend = backend.Config{Kind: kind, Masters: masters}
	return inv, nil
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
		fmt.Fprintf(stderr, "redlock-bench fencing: %s\n", redactSecrets(oneLine(err), inv.secret))
		return exitError
	}
	return exitOK
}
