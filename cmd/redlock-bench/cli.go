package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/term"

	"quorumlock.dev/cmd/redlock-bench/internal/backend"
	"quorumlock.dev/cmd/redlock-bench/internal/benchrun"
	"quorumlock.dev/cmd/redlock-bench/internal/drivers"
	"quorumlock.dev/cmd/redlock-bench/internal/output"
	"quorumlock.dev/cmd/redlock-bench/internal/plot"
	"quorumlock.dev/redlock"
)

// Exit statuses of [run].
const (
	exitOK    = 0
	exitError = 1 // the run failed: a server could not be reached, a write failed
	exitUsage = 2 // bad flags
)

// invocation is a parsed command line.
type invocation struct {
	Config benchrun.Config
	Format string // text, json or csv
	Plot   string // "" or a .svg/.png path

	flags *flag.FlagSet // what parse read: names the flags of an error found later
}

// parse reads the command line. Errors wrap benchrun.ErrConfig (or are
// flag's own) and mean exit status 2.
func parse(args []string, stderr io.Writer) (*invocation, error) {
	fs := flag.NewFlagSet("redlock-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	inv := &invocation{flags: fs}
	cfg := &inv.Config
	var backend, conc, driverList string
	fs.StringVar(&backend, "backend", "embedded", "where the servers come from: embedded (in-process miniredis) or redis-server (real processes started and stopped by the run); -addrs selects existing servers")
	var servers serverFlags
	servers.register(fs)
	fs.IntVar(&cfg.Masters, "masters", 5, "masters of the redlock mode")
	fs.StringVar(&cfg.Scenario, "scenario", "healthy", "healthy | slow (one master behind a proxy: rows at 0 ms and -delay) | dead (-dead masters unreachable) | scale (masters 1, 3, 5, 7, 9) | contended (-c goroutines wait in Lock for -keys resources, 1 by default)")
	fs.StringVar(&conc, "c", "1,8,64", "concurrency: goroutines sharing one client, comma-separated; one row per value")
	fs.DurationVar(&cfg.Duration, "d", 2*time.Second, "measuring time per row")
	fs.Int64Var(&cfg.Cycles, "n", 0, "attempts per row instead of -d")
	fs.DurationVar(&cfg.TTL, "ttl", 10*time.Second, "lock TTL")
	fs.DurationVar(&cfg.NodeTimeout, "node-timeout", 50*time.Millisecond, "per-master timeout")
	fs.IntVar(&cfg.Keys, "keys", 10000, "resources the locks are spread over (1: every goroutine wants the same lock; the contended scenario's default)")
	fs.DurationVar(&cfg.Hold, "hold", 0, "simulated critical section, e.g. 2ms or 200ms")
	fs.BoolVar(&cfg.Fence, "fence", false, "mint a fencing token on each acquisition")
	fs.DurationVar(&cfg.Delay, "delay", 30*time.Millisecond, "slow scenario: latency added to one master")
	fs.IntVar(&cfg.Dead, "dead", 2, "dead scenario: unreachable masters")
	fs.IntVar(&cfg.Clients, "clients", 0, "contended scenario: also rows where the goroutines share this many separate clients (each with its own connections), as separate processes would, plain, fair and redsync's; 0 for none")
	fs.IntVar(&cfg.Procs, "procs", 0, "contended scenario: also rows where the goroutines run in this many worker processes (this program started again; goroutine i in process i mod N), each goroutine with a client of its own, plain and fair; 0 for none, at most 64")
	fs.StringVar(&driverList, "driver", drivers.Default, "Redis clients the masters are reached through, comma-separated, each a dimension of every row: "+strings.Join(drivers.Names, ", "))
	fs.BoolVar(&cfg.Raw, "raw", false, "healthy scenario: also the raw quorum loop (parallel SET NX PX, done at a majority; compare-and-delete on every master) per driver, the least a Redlock client must do")
	fs.IntVar(&cfg.Rounds, "rounds", 4, "slices each row is measured in, alternating with the other rows of its group")
	fs.StringVar(&inv.Format, "o", "text", "output format: text, json or csv")
	fs.StringVar(&inv.Plot, "plot", "", "also draw acquire-latency percentiles into this .svg or .png file")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: redlock-bench [flags]\n       redlock-bench fencing [flags]   (the fence's duplicate-write benchmark; -h for its flags)\n       redlock-bench chaos [flags]     (faults injected on real servers, counted; -h for its flags)\n       redlock-bench check -addrs ...  (the masters' settings that matter to the lock; -h for its flags)\n       redlock-bench inspect -addrs ... -resource R   (who holds a lock, on each master; -h)\n       redlock-bench release -addrs ... -resource R -token T   (break-glass release of a gone holder's lock; -h)\n       redlock-bench choose [flags]    (single Redis, Redlock, etcd and PostgreSQL measured side by side; -h for its flags)\n\nRedlock over N masters against the single-instance mode, side by side.\n\n")
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), columnsHelp)
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, usage(fs, "unexpected argument %q", fs.Arg(0))
	}
	cfg.Backend.Kind = backend
	if cfg.Scenario == "contended" && !flagSet(fs, "keys") {
		cfg.Keys = 1
	}
	if servers.addrs != "" {
		if set := flagSet(fs, "backend"); set && backend != "addrs" {
			return nil, usage(fs, "-addrs and -backend %s exclude each other", backend)
		}
		cfg.Backend.Kind = "addrs"
	} else if backend == "addrs" {
		return nil, usage(fs, "-backend addrs needs -addrs")
	}
	if err := servers.apply(fs, &cfg.Backend); err != nil {
		return nil, err
	}
	if !slices.Contains([]string{"embedded", "redis-server", "addrs"}, cfg.Backend.Kind) {
		return nil, usage(fs, "unknown backend %q", backend)
	}
	names, err := drivers.Parse(driverList)
	if err != nil {
		return nil, usage(fs, "-driver: %w", err)
	}
	cfg.Drivers = names
	concs, err := listFlag(fs, "c", conc)
	if err != nil {
		return nil, err
	}
	for _, s := range concs {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return nil, usage(fs, "-c: %q is not a positive number", s)
		}
		cfg.Concurrency = append(cfg.Concurrency, n)
	}
	if flagSet(fs, "n") && flagSet(fs, "d") {
		return nil, usage(fs, "-n and -d exclude each other")
	}
	if cfg.Cycles < 0 {
		return nil, usage(fs, "-n %d: want a positive number of attempts per row", cfg.Cycles)
	}
	if cfg.Cycles == 0 && cfg.Duration <= 0 {
		return nil, usage(fs, "-d %v: want a positive measuring time (or -n attempts per row)", cfg.Duration)
	}
	if cfg.Cycles > 0 {
		cfg.Duration = 0
	}
	if !slices.Contains(output.Formats, inv.Format) {
		return nil, usage(fs, "-o %q: want one of %v", inv.Format, output.Formats)
	}
	if p := strings.ToLower(inv.Plot); p != "" && !strings.HasSuffix(p, ".svg") && !strings.HasSuffix(p, ".png") {
		return nil, usage(fs, "-plot %q: want a .svg or .png file", inv.Plot)
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(fs.Output(), "%s: %s\n", fs.Name(), nameFlags(fs, oneLine(err)))
		fs.Usage()
		return nil, err
	}
	if cfg.Backend.Kind == "addrs" {
		if err := checkAddrs(fs, cfg); err != nil {
			return nil, err
		}
	}
	return inv, nil
}

// checkAddrs checks, before anything connects, what the run's -addrs backend needs: enough
// masters, addresses that parse, a CA file that loads, a fence node for -fence.
func checkAddrs(fs *flag.FlagSet, cfg *benchrun.Config) error {
	bc := cfg.Backend
	need, why := cfg.Masters, "-masters"
	if cfg.Scenario == "scale" {
		need, why = slices.Max(benchrun.ScaleMasters), "the scale scenario"
	}
	if len(bc.Addrs) < need {
		return usage(fs, "-addrs: %d addresses for %d masters (%s): give %d, or lower -masters", len(bc.Addrs), need, why, need)
	}
	all := slices.Clone(bc.Addrs)
	for _, f := range []struct{ name, addr string }{{"single-addr", bc.SingleAddr}, {"fence-addr", bc.FenceAddr}} {
		if f.addr != "" {
			all = append(all, f.addr)
		}
	}
	for _, f := range []struct {
		name  string
		addrs []string
	}{{"addrs", bc.Addrs}, {"single-addr", nonEmpty(bc.SingleAddr)}, {"fence-addr", nonEmpty(bc.FenceAddr)}} {
		opts, _, err := backend.ServerOptions(f.addrs, "", bc.Password, "")
		if err != nil {
			return usage(fs, "-%s: %s", f.name, configReason(err))
		}
		if f.name != "addrs" {
			continue
		}
		seen := map[string]bool{}
		for _, o := range opts[:need] {
			if seen[o.Addr] {
				return usage(fs, "-addrs: master %s listed twice: each master is a server of its own", o.Addr)
			}
			seen[o.Addr] = true
		}
	}
	if bc.TLSCAFile != "" {
		if _, _, err := backend.ServerOptions(all, "", bc.Password, bc.TLSCAFile); err != nil {
			return usage(fs, "-tls-ca: %s", configReason(err))
		}
	}
	if cfg.Fence && bc.FenceAddr == "" {
		return usage(fs, "-fence with -addrs needs -fence-addr, the node of the fence counter")
	}
	return nil
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// configReason is err's reason without the configuration error's own words.
func configReason(err error) string {
	if _, rest, ok := strings.Cut(err.Error(), backend.ErrConfig.Error()+": "); ok {
		return oneLine(errors.New(rest))
	}
	return oneLine(err)
}

// serverFlags are the flags that name existing servers and how to reach them, shared by
// the subcommands that talk to them.
type serverFlags struct {
	addrs, single, fence string
	passwordEnv, tlsCA   string
}

func (s *serverFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.addrs, "addrs", "", "existing masters, comma-separated, each host:port or redis://[user@]host:port[/db] (rediss:// for TLS); never flushed, the run's keys are removed afterwards")
	fs.StringVar(&s.single, "single-addr", "", "with -addrs: the server for the single-instance mode, as in -addrs (default: the first of -addrs)")
	fs.StringVar(&s.fence, "fence-addr", "", "with -addrs: the fence counter node, as in -addrs (needed for -fence)")
	fs.StringVar(&s.passwordEnv, "password-env", "", "with -addrs: the environment variable holding the password of every server whose URL has none (e.g. REDISCLI_AUTH); keeps it out of the command line")
	fs.StringVar(&s.tlsCA, "tls-ca", "", "with rediss:// addresses: PEM file of the CAs their certificates must chain to (default: the system's)")
}

// apply puts the flags into bc, whose Kind the caller has set; an error has been printed.
func (s *serverFlags) apply(fs *flag.FlagSet, bc *backend.Config) error {
	if bc.Kind != "addrs" {
		if s.single != "" || s.fence != "" || s.passwordEnv != "" || s.tlsCA != "" {
			return usage(fs, "-single-addr, -fence-addr, -password-env and -tls-ca need -addrs")
		}
		return nil
	}
	addrs, err := listFlag(fs, "addrs", s.addrs)
	if err != nil {
		return err
	}
	bc.Addrs, bc.SingleAddr, bc.FenceAddr, bc.TLSCAFile = addrs, s.single, s.fence, s.tlsCA
	warnUnverified(fs.Output(), append(addrs, s.single, s.fence)...)
	if s.passwordEnv != "" {
		pw, ok := os.LookupEnv(s.passwordEnv)
		if !ok || pw == "" {
			return usage(fs, "-password-env %s: the variable is not set", s.passwordEnv)
		}
		bc.Password = pw
	}
	return nil
}

// pgPassword checks a -pg-dsn and returns the password a connection would use: the DSN's,
// or PGPASSWORD's, or the passfile's. No line the command prints may carry it.
func pgPassword(fs *flag.FlagSet, dsn string) (string, error) {
	if dsn == "" {
		return "", nil
	}
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		// pgx's message quotes the DSN with the password masked as best it can; an
		// unparsable DSN may hide one where pgx does not look, so say nothing of it.
		return "", usage(fs, "-pg-dsn is not a PostgreSQL URL (postgres://...) or key=value string")
	}
	return cfg.Password, nil
}

// redactSecrets replaces every non-empty secret in s with "xxxxx".
func redactSecrets(s string, secrets ...string) string {
	for _, secret := range secrets {
		if secret != "" {
			s = strings.ReplaceAll(s, secret, "xxxxx")
		}
	}
	return s
}

// usage prints a bad flag's error, on one line that names the flag as it is typed, and the
// usage text, and returns the error.
func usage(fs *flag.FlagSet, format string, args ...any) error {
	err := fmt.Errorf("%w: "+format, append([]any{benchrun.ErrConfig}, args...)...)
	fmt.Fprintf(fs.Output(), "%s: %s\n", fs.Name(), nameFlags(fs, oneLine(err)))
	fs.Usage()
	return err
}

// nameFlags writes the flags of fs that msg speaks of in words as they are typed: the
// packages behind the commands name their settings ("masters 0 outside 1..16", "node
// timeout"), the command line names flags ("-masters", "-node-timeout"). A flag of one
// letter is known by the first word of its help ("-c": "concurrency: ..." or "workers ...").
// A message about a server's address gets its flag at the end. A message that names a flag
// already is left as it is.
func nameFlags(fs *flag.FlagSet, msg string) string {
	type word struct{ text, flag string }
	var words []word
	named := false
	fs.VisitAll(func(f *flag.Flag) {
		named = named || regexp.MustCompile(`(^|[^\w-])-`+regexp.QuoteMeta(f.Name)+`\b`).MatchString(msg)
		if len(f.Name) > 1 {
			words = append(words, word{strings.ReplaceAll(f.Name, "-", " "), f.Name})
		} else if first, _, _ := strings.Cut(f.Usage, " "); first != "" {
			words = append(words, word{strings.TrimRight(first, ":,"), f.Name})
		}
	})
	if named {
		return msg
	}
	// What package backend calls the servers of a flag: the flag goes at the end.
	for _, a := range []word{{"master address", "addrs"}, {"single address", "single-addr"}, {"fence address", "fence-addr"}, {"TLS CA file", "tls-ca"}} {
		if fs.Lookup(a.flag) != nil && strings.Contains(msg, a.text) {
			return msg + " (-" + a.flag + ")"
		}
	}
	// Longer first: "pause rate" before "pause".
	slices.SortStableFunc(words, func(a, b word) int { return len(b.text) - len(a.text) })
	for _, w := range words {
		re := regexp.MustCompile(`(^|[^\w-])` + regexp.QuoteMeta(w.text) + `\b([^-]|$)`)
		msg = re.ReplaceAllString(msg, "${1}-"+w.flag+"${2}")
	}
	return msg
}

// newFlag names the flag to fix for a configuration that redlock.New
// refused (err wraps redlock.ErrInvalidArgument): the fence counter on a
// master, or one master given twice. Other errors get nothing.
func newFlag(err error) string {
	msg := err.Error()
	switch {
	case !errors.Is(err, redlock.ErrInvalidArgument):
		return ""
	case strings.Contains(msg, "the fence counter is on master"):
		return " (-fence-addr)"
	case strings.Contains(msg, "are both") || strings.Contains(msg, "are the same client"):
		return " (-addrs)"
	}
	return ""
}

func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// warnUnverified says, on w, which of addrs turn certificate checks off.
func warnUnverified(w io.Writer, addrs ...string) {
	for _, a := range backend.Unverified(addrs...) {
		fmt.Fprintf(w, "redlock-bench: warning: %s turns certificate checks off (skip_verify): anyone on the path can read the lock tokens and release the locks\n", a)
	}
}

// columnsHelp ends -h: what the text report's columns and the progress
// bar mean (the JSON and CSV fields are named in the package doc).
const columnsHelp = `
The report (text), one row per variant and concurrency:
  ops/s                 cycles per second: TryLock won, held (-hold), Unlock
  p50 ... max µs        the latency of every TryLock attempt, won or lost
  cycle p50 µs          TryLock + hold + Unlock of the attempts that won
  acquired              attempts that won; contended: lost to another holder;
  unavailable           lost because too many masters failed (ErrQuorumUnavailable);
  errors                any other failure (the row's first one is printed below the table)
  allocs/op, CPU s      heap allocations per attempt and CPU seconds of the whole process
  p50 ratio             this row's p50 over the named row's, measured in the same run;
                        "- (acquired nothing)" when either row won nothing: its p50 is of failures
The contended scenario (-scenario contended) prints sections/s (critical sections per
second), Lock p50 and wait p99 (how long Lock waited), handoff p50/p99 (from one holder's
Unlock call to another goroutine's Lock returning), fairness (min/max sections per goroutine),
split % (lost rounds whose votes were split) and violations (overlapping sections: must be 0).
The progress bar, on a terminal, counts the run's time (-d times rows) or its cycles (-n).
`

// listFlag is the comma-separated list that flag name was given, s: an
// empty item ("1,,8", a trailing comma) is a usage error, not skipped.
func listFlag(fs *flag.FlagSet, name, s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	for i, part := range parts {
		if parts[i] = strings.TrimSpace(part); parts[i] == "" {
			return nil, usage(fs, "-%s %q: item %d of the list is empty", name, s, i+1)
		}
	}
	return parts, nil
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

// run is the whole command: parse, run, write, plot. It returns the exit
// status. A progress bar goes to stderr when stderr is a terminal.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "fencing" {
		return runFencing(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "chaos" {
		return runChaos(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "check" {
		return runCheck(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "inspect" {
		return runInspect(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "release" {
		return runRelease(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "choose" {
		return runChoose(ctx, args[1:], stdout, stderr)
	}
	inv, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return exitUsage
	}
	if isTerminal(stderr) {
		inv.Config.Progress = stderr
	}
	rep, err := benchrun.Run(ctx, inv.Config)
	if err != nil {
		if errors.Is(err, benchrun.ErrConfig) || errors.Is(err, backend.ErrConfig) {
			// Found before any server started: backend.Open checks first.
			fmt.Fprintf(stderr, "redlock-bench: %s\n", nameFlags(inv.flags, configReason(err)))
			return exitUsage
		}
		fmt.Fprintf(stderr, "redlock-bench: %s\n", oneLine(err))
		return exitError
	}
	if err := output.Write(stdout, rep, inv.Format); err != nil {
		fmt.Fprintf(stderr, "redlock-bench: %s\n", oneLine(err))
		return exitError
	}
	if inv.Plot != "" {
		if err := plot.Draw(inv.Plot, rep); err != nil {
			fmt.Fprintf(stderr, "redlock-bench: plot: %s\n", oneLine(err))
			return exitError
		}
	}
	return exitOK
}

// isTerminal reports whether w is a terminal, where a progress bar can be drawn.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// oneLine keeps the first line of a joined error, without the name of the
// package of ours it starts with: for a person, one clear line.
func oneLine(err error) string {
	// The whole reason, on one line: errors.Join's and a server's lines
	// joined, not cut to the first (a wrong password, a missing database
	// and a refused connection read alike).
	s := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", " ; ")), " ")
	s = strings.ReplaceAll(s, " ; ", "; ")
	for _, pkg := range []string{"backend", "benchrun", "drivers", "output", "plot", "fencingbench"} {
		if rest, ok := strings.CutPrefix(s, pkg+": "); ok {
			s = rest
			break
		}
	}
	return s + hint(s)
}

// hint is what to do about the reasons in msg that a user can fix.
func hint(msg string) string {
	switch {
	case strings.Contains(msg, "NOAUTH"):
		return " (the server wants a password: -password-env NAME with the password in $NAME, or redis://user:password@host:port)"
	case strings.Contains(msg, "WRONGPASS"):
		return " (the user or password is wrong: check -password-env's variable or the URL's user:password)"
	case strings.Contains(msg, "EOF"):
		return " (the port closed the connection without a Redis reply: is it a Redis server, and does it want TLS (rediss://)?)"
	}
	return ""
}
