package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"quorumlock.dev/cmd/redlock-bench/internal/backend"
	"quorumlock.dev/cmd/redlock-bench/internal/benchrun"
	"quorumlock.dev/fence"
	"quorumlock.dev/redlock"
	"quorumlock.dev/redlock/check"

	"quorumlock.dev/driver"

	"quorumlock.dev/driver/goredis"
)

// checkInvocation is a parsed `redlock-bench check` command line.
type checkInvocation struct {
	masters     []*redis.Options
	fence       *redis.Options // nil without -fence-addr
	format      string
	nodeTimeout time.Duration
}

// opsFlags are the flags of the commands that talk to an operator's
// servers (check, inspect, release): where they are and how to log in.
type opsFlags struct {
	addrs, fenceAddr, passwordEnv, tlsCA string
	format                               string
	nodeTimeout                          time.Duration
}

// register adds the flags to fs; fence: whether -fence-addr is one.
func (f *opsFlags) register(fs *flag.FlagSet, fence bool) {
	fs.StringVar(&f.addrs, "addrs", "", "the masters, comma-separated, each host:port or redis://[user@]host:port[/db] (rediss:// for TLS) (required)")
	if fence {
		fs.StringVar(&f.fenceAddr, "fence-addr", "", "the fence counter node, as in -addrs (judged by the counter's stricter rules)")
	}
	fs.StringVar(&f.passwordEnv, "password-env", "", "the environment variable holding the password of every server whose URL has none (e.g. REDISCLI_AUTH); keeps it out of the command line")
	fs.StringVar(&f.tlsCA, "tls-ca", "", "with rediss:// addresses: PEM file of the CAs their certificates must chain to (default: the system's)")
	fs.StringVar(&f.format, "o", "text", "output format: text or json")
	fs.DurationVar(&f.nodeTimeout, "node-timeout", time.Second, "bound of each call to a node")
}

// resolve checks the flags once parsed and returns the servers' options.
func (f *opsFlags) resolve(fs *flag.FlagSet) (masters []*redis.Options, fenceNode *redis.Options, err error) {
	if fs.NArg() > 0 {
		return nil, nil, usage(fs, "unexpected argument %q", fs.Arg(0))
	}
	list, err := listFlag(fs, "addrs", f.addrs)
	if err != nil {
		return nil, nil, err
	}
	if len(list) == 0 {
		return nil, nil, usage(fs, "-addrs is required")
	}
	var password string
	if f.passwordEnv != "" {
		pw, ok := os.LookupEnv(f.passwordEnv)
		if !ok || pw == "" {
			return nil, nil, usage(fs, "-password-env %s: the variable is not set", f.passwordEnv)
		}
		password = pw
	}
	warnUnverified(fs.Output(), append(list, f.fenceAddr)...)
	if masters, fenceNode, err = backend.ServerOptions(list, f.fenceAddr, password, f.tlsCA); err != nil {
		// One kind of configuration error is enough to say.
		why := oneLine(err)
		if _, rest, ok := strings.Cut(err.Error(), backend.ErrConfig.Error()+": "); ok {
			why = oneLine(errors.New(rest))
		}
		return nil, nil, usage(fs, "%s", why)
	}
	if f.format != "text" && f.format != "json" {
		return nil, nil, usage(fs, "-o %q: want text or json", f.format)
	}
	if f.nodeTimeout <= 0 {
		return nil, nil, usage(fs, "-node-timeout %v is not positive", f.nodeTimeout)
	}
	return masters, fenceNode, nil
}

func parseCheck(args []string, stderr io.Writer) (*checkInvocation, error) {
	fs := flag.NewFlagSet("redlock-bench check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f opsFlags
	f.register(fs, true)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: redlock-bench check -addrs host:port,... [flags]\n\n"+
			"The settings of each master and of the fence counter that matter to the lock\n"+
			"(redlock.Client.Check): ok, unknown, warning or problem, with what each means.\n"+
			"Nothing is written to the servers. Exit status 1 when some setting is a problem;\n"+
			"a node that could not be reached is one.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	masters, fenceNode, err := f.resolve(fs)
	if err != nil {
		return nil, err
	}
	return &checkInvocation{masters: masters, fence: fenceNode, format: f.format, nodeTimeout: f.nodeTimeout}, nil
}

// runCheck is `redlock-bench check`: exit 0 when no setting is a problem
// (warnings and unknowns included), 1 on a problem, a node that could not
// be reached (no reply, a refused login; a problem here, see operatorView)
// or a failure, 2 on bad flags or addresses New refuses. The printed worst
// status is problem exactly when the exit status is 1 for the report.
func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	inv, err := parseCheck(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return exitUsage
	}
	rep, err := checkServers(ctx, inv)
	if err != nil {
		fmt.Fprintf(stderr, "redlock-bench check: %s%s\n", oneLine(err), newFlag(err))
		if errors.Is(err, benchrun.ErrConfig) {
			return exitUsage // e.g. the fence counter on a master
		}
		return exitError
	}
	if err := writeCheck(stdout, rep, inv.format); err != nil {
		fmt.Fprintf(stderr, "redlock-bench check: %s\n", oneLine(err))
		return exitError
	}
	if rep.Worst() == check.Problem {
		return exitError
	}
	return exitOK
}

func checkServers(ctx context.Context, inv *checkInvocation) (check.Report, error) {
	var clients []*redis.Client
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	dial := func(o *redis.Options) *redis.Client {
		o.MaxRetries, o.ContextTimeoutEnabled, o.DialTimeout, o.PoolSize = -1, true, inv.nodeTimeout, 2
		c := redis.NewClient(o)
		clients = append(clients, c)
		return c
	}
	masters := make([]driver.Conn, len(inv.masters))
	for i, o := range inv.masters {
		masters[i] = goredis.Conn(dial(o))
	}
	opts := []redlock.Option{redlock.WithNodeTimeout(inv.nodeTimeout)}
	if inv.fence != nil {
		counter, err := fence.NewRedisCounter(goredis.Conn(dial(inv.fence)))
		if err != nil {
			return check.Report{}, err
		}
		opts = append(opts, redlock.WithFence(counter))
	}
	client, err := redlock.New(masters, opts...)
	if err != nil {
		return check.Report{}, fmt.Errorf("%w: %w", benchrun.ErrConfig, err)
	}
	rep, err := client.Check(ctx)
	if err != nil {
		return check.Report{}, err
	}
	for i := range rep.Masters {
		rep.Masters[i] = operatorView(rep.Masters[i])
	}
	if rep.Fence != nil {
		f := operatorView(*rep.Fence)
		rep.Fence = &f
	}
	return rep, nil
}

// operatorView is n as this command reports it. The go-redis options are
// this command's own clients', not the application's: they would tell the
// operator nothing, and are left out. A node that could not be asked is a
// problem here, where Client.Check calls it a warning (so that a strict
// client still locks on the masters that are up): an operator who asked
// about a node has no answer, and the exit status says so.
func operatorView(n check.NodeReport) check.NodeReport {
	var kept []check.Finding
	for _, f := range n.Findings {
		if f.Source != "server" {
			continue
		}
		if f.Setting == "reachable" {
			f.Why += hint(f.Why)
			if f.Status < check.Problem {
				f.Status = check.Problem
				f.Why += "; a problem for this check, which could not judge the node"
			}
		}
		kept = append(kept, f)
	}
	n.Findings = kept
	return n
}

// writeCheck prints rep as a table (one line per setting, then the worst
// status) or as JSON: the report's masters and fence, and "worst".
func writeCheck(w io.Writer, rep check.Report, format string) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			check.Report
			Worst check.Status `json:"worst"`
		}{rep, rep.Worst()})
	}
	_, err := rep.WriteTo(w)
	return err
}
