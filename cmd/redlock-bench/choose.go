package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"quorumlock.dev/cmd/redlock-bench/internal/choose"
	"quorumlock.dev/cmd/redlock-bench/internal/output"
	"quorumlock.dev/cmd/redlock-bench/internal/plot"
)

// chooseInvocation is a parsed `redlock-bench choose` command line.
type chooseInvocation struct {
	cfg    choose.Config
	format string
	plot   string
}

func parseChoose(args []string, stderr io.Writer) (*chooseInvocation, error) {
	fs := flag.NewFlagSet("redlock-bench choose", flag.ContinueOnError)
	fs.SetOutput(stderr)
	inv := &chooseInvocation{}
	c := &inv.cfg
	var options, conc string
	fs.StringVar(&options, "options", strings.Join(choose.Options, ","), "the options to run, comma-separated")
	fs.StringVar(&c.Backend, "backend", "embedded", "the Redis servers: embedded (in-process miniredis) or redis-server (real processes); Sentinel's failover always runs redis-server")
	fs.StringVar(&conc, "c", "1,8,64", "concurrency: goroutines, each with its own session or connection where the option has them, comma-separated; one row per value")
	fs.DurationVar(&c.Duration, "d", time.Second, "measuring time per row")
	fs.IntVar(&c.Keys, "keys", 10000, "resources the locks are spread over")
	fs.DurationVar(&c.TTL, "ttl", 10*time.Second, "the measured locks' TTL (etcd: the session's lease, whole seconds)")
	fs.DurationVar(&c.NodeTimeout, "node-timeout", 50*time.Millisecond, "per-master timeout of the Redis options")
	fs.DurationVar(&c.Lease, "lease", 300*time.Millisecond, "the paused holder's lease in the stale-write experiment, paused for twice as long (etcd: at least its minimum lease, 2s here)")
	fs.BoolVar(&c.Require, "require", false, "fail, rather than skip an option, when its server is not installed (what the tests do under CI=true)")
	fs.StringVar(&inv.format, "o", "text", "output format: text, json or csv")
	fs.StringVar(&inv.plot, "plot", "", "also draw acquire-latency percentiles per option into this .svg or .png file")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: redlock-bench choose [flags]\n\n"+
			"The lock-choice table measured here: single Redis, Redlock over 5 masters, etcd's Mutex and a\n"+
			"PostgreSQL row lock with a version column; latency, cycles/s, the fence, a paused holder's late\n"+
			"write and a failover, per option (columns: docs/choosing.md).\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, usage(fs, "unexpected argument %q", fs.Arg(0))
	}
	var err error
	if c.Options, err = listFlag(fs, "options", options); err != nil {
		return nil, err
	}
	for _, o := range c.Options {
		if !slices.Contains(choose.Options, o) {
			return nil, usage(fs, "-options: unknown option %q (want %s)", o, strings.Join(choose.Options, ", "))
		}
	}
	concs, err := listFlag(fs, "c", conc)
	if err != nil {
		return nil, err
	}
	for _, s := range concs {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return nil, usage(fs, "-c: %q is not a positive number", s)
		}
		c.Concurrency = append(c.Concurrency, n)
	}
	if c.Backend != "embedded" && c.Backend != "redis-server" {
		return nil, usage(fs, "-backend %q: want embedded or redis-server", c.Backend)
	}
	if !slices.Contains(output.Formats, inv.format) {
		return nil, usage(fs, "-o %q: want one of %v", inv.format, output.Formats)
	}
	if p := strings.ToLower(inv.plot); p != "" && !strings.HasSuffix(p, ".svg") && !strings.HasSuffix(p, ".png") {
		return nil, usage(fs, "-plot %q: want a .svg or .png file", inv.plot)
	}
	if c.Duration <= 0 || c.TTL < time.Second || c.NodeTimeout <= 0 || c.Lease <= c.NodeTimeout || c.Keys < 1 {
		return nil, usage(fs, "-d %v and -node-timeout %v must be positive, -ttl %v at least 1s, -lease %v above -node-timeout, -keys %d at least 1",
			c.Duration, c.NodeTimeout, c.TTL, c.Lease, c.Keys)
	}
	return inv, nil
}

// runChoose is `redlock-bench choose`: parse, run, write, plot.
func runChoose(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	inv, err := parseChoose(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return exitUsage
	}
	// One line as each option starts, and one for each skipped.
	inv.cfg.Progress = stderr
	rep, err := choose.Run(ctx, inv.cfg)
	if err == nil {
		err = choose.Write(stdout, rep, inv.format)
	}
	if err == nil && inv.plot != "" {
		if err = plot.Draw(inv.plot, choose.PlotReport(rep)); err != nil {
			err = fmt.Errorf("plot: %w", err)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "redlock-bench choose: %s\n", strings.TrimPrefix(oneLine(err), "choose: "))
		return exitError
	}
	return exitOK
}
