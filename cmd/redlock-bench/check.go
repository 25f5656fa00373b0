package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"quorumlock.dev/fence"
	"quorumlock.dev/internal/benchrun"
	"quorumlock.dev/redlock"
)

// checkInvocation is a parsed `redlock-bench check` command line.
type checkInvocation struct {
	addrs       []string
	fenceAddr   string
	format      string
	nodeTimeout time.Duration
}

func parseCheck(args []string, stderr io.Writer) (*checkInvocation, error) {
	fs := flag.NewFlagSet("redlock-bench check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	inv := &checkInvocation{}
	var addrs string
	fs.StringVar(&addrs, "addrs", "", "the masters, host:port,... (required; nothing is written to them)")
	fs.StringVar(&inv.fenceAddr, "fence-addr", "", "the fence counter node, host:port (judged by the counter's stricter rules)")
	fs.StringVar(&inv.format, "o", "text", "output format: text or json")
	fs.DurationVar(&inv.nodeTimeout, "node-timeout", time.Second, "bound of each call to a node")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: redlock-bench check -addrs host:port,... [flags]\n\n"+
			"The settings of each master and of the fence counter that matter to the lock\n"+
			"(redlock.Client.Check): ok, unknown, warning or problem, with what each means.\n"+
			"Exit status 1 when some setting is a problem.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, usage(fs, "unexpected argument %q", fs.Arg(0))
	}
	if inv.addrs = splitList(addrs); len(inv.addrs) == 0 {
		return nil, usage(fs, "-addrs is required")
	}
	if inv.format != "text" && inv.format != "json" {
		return nil, usage(fs, "-o %q: want text or json", inv.format)
	}
	if inv.nodeTimeout <= 0 {
		return nil, usage(fs, "-node-timeout %v is not positive", inv.nodeTimeout)
	}
	return inv, nil
}

// runCheck is `redlock-bench check`: exit 0 when no setting is a problem
// (warnings and unknowns included), 1 on a problem or a failure, 2 on bad
// flags or addresses New refuses.
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
		fmt.Fprintf(stderr, "redlock-bench check: %s\n", oneLine(err))
		if errors.Is(err, benchrun.ErrConfig) {
			return exitUsage // e.g. the fence counter on a master
		}
		return exitError
	}
	if err := writeCheck(stdout, rep, inv.format); err != nil {
		fmt.Fprintf(stderr, "redlock-bench check: %s\n", oneLine(err))
		return exitError
	}
	if rep.Worst() == redlock.Problem {
		return exitError
	}
	return exitOK
}

func checkServers(ctx context.Context, inv *checkInvocation) (redlock.Report, error) {
	var clients []*redis.Client
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	dial := func(addr string) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true,
			DialTimeout: inv.nodeTimeout, PoolSize: 2})
		clients = append(clients, c)
		return c
	}
	masters := make([]redlock.Master, len(inv.addrs))
	for i, a := range inv.addrs {
		masters[i] = dial(a)
	}
	opts := []redlock.Option{redlock.WithNodeTimeout(inv.nodeTimeout)}
	if inv.fenceAddr != "" {
		counter, err := fence.NewRedisCounter(dial(inv.fenceAddr))
		if err != nil {
			return redlock.Report{}, err
		}
		opts = append(opts, redlock.WithFence(counter))
	}
	client, err := redlock.New(masters, opts...)
	if err != nil {
		return redlock.Report{}, fmt.Errorf("%w: %w", benchrun.ErrConfig, err)
	}
	rep, err := client.Check(ctx)
	if err != nil {
		return redlock.Report{}, err
	}
	// The go-redis options are this command's own clients', not the
	// application's: they would tell the operator nothing.
	for i := range rep.Masters {
		rep.Masters[i] = serverOnly(rep.Masters[i])
	}
	if rep.Fence != nil {
		f := serverOnly(*rep.Fence)
		rep.Fence = &f
	}
	return rep, nil
}

func serverOnly(n redlock.NodeReport) redlock.NodeReport {
	var kept []redlock.Finding
	for _, f := range n.Findings {
		if f.Source == "server" {
			kept = append(kept, f)
		}
	}
	n.Findings = kept
	return n
}

// writeCheck prints rep as a table (one line per setting, then the worst
// status) or as JSON: the report's masters and fence, and "worst".
func writeCheck(w io.Writer, rep redlock.Report, format string) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			redlock.Report
			Worst redlock.Status `json:"worst"`
		}{rep, rep.Worst()})
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tADDR\tSETTING\tVALUE\tSTATUS\tWHY")
	nodes := rep.Masters
	if rep.Fence != nil {
		nodes = append(nodes[:len(nodes):len(nodes)], *rep.Fence)
	}
	for _, n := range nodes {
		for _, f := range n.Findings {
			v := f.Value
			if v == "" {
				v = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", n.Node, n.Addr, f.Setting, v, f.Status, f.Why)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "worst: %s\n", rep.Worst())
	return err
}
