package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/term"
)

// Exit statuses of [Main].
const (
	ExitOK    = 0
	ExitError = 1 // the run failed: a server could not be reached, a write failed
	ExitUsage = 2 // bad flags
)

// Invocation is a parsed command line.
type Invocation struct {
	Config Config
	Format string // text, json or csv
	Plot   string // "" or a .svg/.png path
}

// Parse reads the command line. Errors are ErrConfig (or flag's own) and
// mean exit status 2.
func Parse(args []string, stderr io.Writer) (*Invocation, error) {
	fs := flag.NewFlagSet("redlock-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	inv := &Invocation{}
	cfg := &inv.Config
	var backend, addrs, conc string
	fs.StringVar(&backend, "backend", "embedded", "where the servers come from: embedded (in-process miniredis) or redis-server (real processes started and stopped by the run); -addrs selects existing servers")
	fs.StringVar(&addrs, "addrs", "", "existing masters, host:port,... (never flushed; the run's keys are removed afterwards)")
	fs.StringVar(&cfg.Backend.SingleAddr, "single-addr", "", "with -addrs: the server for the single-instance mode (default: the first of -addrs)")
	fs.StringVar(&cfg.Backend.FenceAddr, "fence-addr", "", "with -addrs: the fence counter node (needed for -fence)")
	fs.IntVar(&cfg.Masters, "masters", 5, "masters of the redlock mode")
	fs.StringVar(&cfg.Scenario, "scenario", "healthy", "healthy | slow (one master behind a proxy: rows at 0 ms and -delay) | dead (-dead masters unreachable) | scale (masters 1, 3, 5, 7, 9)")
	fs.StringVar(&conc, "c", "1,8,64", "concurrency: goroutines sharing one client, comma-separated; one row per value")
	fs.DurationVar(&cfg.Duration, "d", 2*time.Second, "measuring time per row")
	fs.Int64Var(&cfg.Cycles, "n", 0, "attempts per row instead of -d")
	fs.DurationVar(&cfg.TTL, "ttl", 10*time.Second, "lock TTL")
	fs.DurationVar(&cfg.NodeTimeout, "node-timeout", 50*time.Millisecond, "per-master timeout")
	fs.IntVar(&cfg.Keys, "keys", 10000, "resources the locks are spread over (1: every goroutine wants the same lock)")
	fs.DurationVar(&cfg.Hold, "hold", 0, "simulated critical section, e.g. 2ms or 200ms")
	fs.BoolVar(&cfg.Fence, "fence", false, "mint a fencing token on each acquisition")
	fs.DurationVar(&cfg.Delay, "delay", 30*time.Millisecond, "slow scenario: latency added to one master")
	fs.IntVar(&cfg.Dead, "dead", 2, "dead scenario: unreachable masters")
	fs.IntVar(&cfg.Rounds, "rounds", 4, "slices each row is measured in, alternating with the other rows of its group")
	fs.StringVar(&inv.Format, "o", "text", "output format: text, json or csv")
	fs.StringVar(&inv.Plot, "plot", "", "also draw acquire-latency percentiles into this .svg or .png file")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: redlock-bench [flags]\n       redlock-bench fencing [flags]   (the fence's duplicate-write benchmark; -h for its flags)\n\nRedlock over N masters against the single-instance mode, side by side.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, usage(fs, "unexpected argument %q", fs.Arg(0))
	}
	cfg.Backend.Kind = backend
	if addrs != "" {
		if set := flagSet(fs, "backend"); set && backend != "addrs" {
			return nil, usage(fs, "-addrs and -backend %s exclude each other", backend)
		}
		cfg.Backend.Kind = "addrs"
		cfg.Backend.Addrs = splitList(addrs)
	} else if backend == "addrs" {
		return nil, usage(fs, "-backend addrs needs -addrs")
	}
	if !slices.Contains([]string{"embedded", "redis-server", "addrs"}, cfg.Backend.Kind) {
		return nil, usage(fs, "unknown backend %q", backend)
	}
	if cfg.Backend.Kind != "addrs" && (cfg.Backend.SingleAddr != "" || cfg.Backend.FenceAddr != "") {
		return nil, usage(fs, "-single-addr and -fence-addr need -addrs")
	}
	for _, s := range splitList(conc) {
		n, err := strconv.Atoi(s)
		if err != nil {
			return nil, usage(fs, "-c: %q is not a number", s)
		}
		cfg.Concurrency = append(cfg.Concurrency, n)
	}
	if flagSet(fs, "n") && flagSet(fs, "d") {
		return nil, usage(fs, "-n and -d exclude each other")
	}
	if cfg.Cycles > 0 {
		cfg.Duration = 0
	}
	if !slices.Contains(Formats, inv.Format) {
		return nil, usage(fs, "-o %q: want one of %v", inv.Format, Formats)
	}
	if p := strings.ToLower(inv.Plot); p != "" && !strings.HasSuffix(p, ".svg") && !strings.HasSuffix(p, ".png") {
		return nil, usage(fs, "-plot %q: want a .svg or .png file", inv.Plot)
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(stderr, err)
		fs.Usage()
		return nil, err
	}
	return inv, nil
}

func usage(fs *flag.FlagSet, format string, args ...any) error {
	err := fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
	fmt.Fprintln(fs.Output(), err)
	fs.Usage()
	return err
}

func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// Main is the whole command: parse, run, write, plot. It returns the exit
// status. A progress bar goes to stderr when stderr is a terminal.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "fencing" {
		return mainFencing(ctx, args[1:], stdout, stderr)
	}
	inv, err := Parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	if err != nil {
		return ExitUsage
	}
	if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		inv.Config.Progress = stderr
	}
	rep, err := Run(ctx, inv.Config)
	if err != nil {
		fmt.Fprintf(stderr, "redlock-bench: %s\n", oneLine(err))
		return ExitError
	}
	if err := Write(stdout, rep, inv.Format); err != nil {
		fmt.Fprintf(stderr, "redlock-bench: %s\n", oneLine(err))
		return ExitError
	}
	if inv.Plot != "" {
		if err := Plot(inv.Plot, rep); err != nil {
			fmt.Fprintf(stderr, "redlock-bench: plot: %s\n", oneLine(err))
			return ExitError
		}
	}
	return ExitOK
}

// oneLine keeps the first line of a joined error: the report for a person
// is one clear line, not a tree.
func oneLine(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return strings.TrimPrefix(s, "bench: ")
}
