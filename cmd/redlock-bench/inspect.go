package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"quorumlock.dev/driver"
	"quorumlock.dev/driver/goredis"
	"quorumlock.dev/fence"
	"quorumlock.dev/leadership"
	"quorumlock.dev/redlock"
)

// Exit statuses of inspect and release beside exitOK, exitError, exitUsage.
const (
	exitNotHeld = 3 // inspect: no token holds a majority; release: no master held the token
)

// opsInvocation is a parsed `redlock-bench inspect` or `release` line.
type opsInvocation struct {
	flags    opsFlags
	masters  []*redis.Options
	fence    *redis.Options // inspect's -fence-addr; nil without
	resource string
	role     string // inspect -role: the role's term instead of a resource
	token    string // release only
	force    bool   // release -force
}

func parseOps(name string, args []string, stderr io.Writer) (*opsInvocation, error) {
	fs := flag.NewFlagSet("redlock-bench "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	inv := &opsInvocation{}
	inv.flags.register(fs, name == "inspect")
	if name == "inspect" {
		fs.StringVar(&inv.resource, "resource", "", "the lock's resource, as the application names it (the key is lock:<resource>) (this or -role)")
		fs.StringVar(&inv.role, "role", "", "instead of -resource: the leadership role whose term to read (package leadership: who leads,\nthe term's fence, the time left on each master)")
	} else {
		fs.StringVar(&inv.resource, "resource", "", "the lock's resource, as the application names it (the key is lock:<resource>) (required)")
	}
	if name == "release" {
		fs.StringVar(&inv.token, "token", "", "the holder's token, as inspect shows it (this or -force)")
		fs.BoolVar(&inv.force, "force", false, "instead of -token: release, on each master, the key an inspection made now finds there, if it still\nholds that value (keys of attempts whose owners are gone, split between tokens); refused while a token holds a majority")
	}
	fs.Usage = func() {
		if name == "inspect" {
			fmt.Fprintf(fs.Output(), "usage: redlock-bench inspect -addrs host:port,... (-resource R | -role ROLE) [flags]\n\n"+
				"What every master holds for the lock on R (redlock.Client.Inspect): the key's token\n"+
				"and remaining TTL, a key of another type, the fair queue's length and head, and the\n"+
				"token that holds a majority. It writes nothing.\n"+
				"Exit status 0 when a token holds a majority, 3 when none does (free, or keys split\n"+
				"between attempts), 1 when a majority of masters could not be read, 2 on bad flags.\n\n"+
				"With -role: the current term of a leadership role (leadership.Inspect): each master's\n"+
				"token, time left and identity record, who leads and the fence its term began with, and\n"+
				"with -fence-addr the counter's last fence. It writes and mints nothing. Exit status 0\n"+
				"when a majority names a leader, 3 when none does, 1 and 2 as above.\n\n")
		} else {
			fmt.Fprintf(fs.Output(), "usage: redlock-bench release -addrs host:port,... -resource R (-token T | -force) [flags]\n\n"+
				"Break-glass: frees the lock on R held by token T on every master (redlock.Client.Release),\n"+
				"with the lock's own compare-and-delete: a key that holds another token is never touched.\n"+
				"Only for a holder known to be gone: a paused holder still believes it holds the lock.\n"+
				"-force inspects first, prints what each master holds, and releases each master's key if it\n"+
				"still holds what was seen (redlock.Client.ForceRelease): for keys that no token holds on a\n"+
				"majority. A key of another type is left alone.\n"+
				"Exit status 0 when some master held T (or what -force saw) and all answered, 3 when none\n"+
				"did, 1 when a master could not be asked or -force found a holder, 2 on bad flags.\n\n")
		}
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	var err error
	if inv.masters, inv.fence, err = inv.flags.resolve(fs); err != nil {
		return nil, err
	}
	switch {
	case inv.role != "" && inv.resource != "":
		return nil, usage(fs, "give -resource or -role, not both")
	case inv.resource == "" && inv.role == "":
		if name == "inspect" {
			return nil, usage(fs, "-resource or -role is required")
		}
		return nil, usage(fs, "-resource is required")
	}
	if name == "release" && (inv.token == "") == !inv.force {
		return nil, usage(fs, "give -token (inspect shows it) or -force, one of them")
	}
	return inv, nil
}

// opsClient is a lock client over the invocation's masters, for one call;
// close runs its and the connections' Close.
func opsClient(inv *opsInvocation) (*redlock.Client, func(), error) {
	var clients []*redis.Client
	closeAll := func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}
	masters := make([]driver.Conn, len(inv.masters))
	for i, o := range inv.masters {
		o.MaxRetries, o.ContextTimeoutEnabled, o.DialTimeout, o.PoolSize = -1, true, inv.flags.nodeTimeout, 2
		c := redis.NewClient(o)
		clients = append(clients, c)
		masters[i] = goredis.Conn(c)
	}
	opts := []redlock.Option{redlock.WithNodeTimeout(inv.flags.nodeTimeout)}
	if inv.fence != nil {
		o := inv.fence
		o.MaxRetries, o.ContextTimeoutEnabled, o.DialTimeout, o.PoolSize = -1, true, inv.flags.nodeTimeout, 2
		c := redis.NewClient(o)
		clients = append(clients, c)
		counter, err := fence.NewRedisCounter(goredis.Conn(c), fence.WithTimeout(inv.flags.nodeTimeout))
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		opts = append(opts, redlock.WithFence(counter))
	}
	client, err := redlock.New(masters, opts...)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return client, func() { _ = client.Close(); closeAll() }, nil
}

// runOps parses a command line of command name, makes its client, and runs
// fn with them; bad flags or a client New refuses exit 2.
func runOps(name string, args []string, stderr io.Writer, fn func(*opsInvocation, *redlock.Client) int) int {
	inv, err := parseOps(name, args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return exitUsage
	}
	client, done, err := opsClient(inv)
	if err != nil {
		fmt.Fprintf(stderr, "redlock-bench %s: %s%s\n", name, oneLine(err), newFlag(err))
		return exitUsage
	}
	defer done()
	return fn(inv, client)
}

// runInspect is `redlock-bench inspect`.
func runInspect(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runOps("inspect", args, stderr, func(inv *opsInvocation, client *redlock.Client) int {
		return inspect(ctx, inv, client, stdout, stderr)
	})
}

func inspect(ctx context.Context, inv *opsInvocation, client *redlock.Client, stdout, stderr io.Writer) int {
	if inv.role != "" {
		return inspectRole(ctx, inv, client, stdout, stderr)
	}
	in, err := client.Inspect(ctx, inv.resource)
	return inspected(stderr, err, func() error { return writeInspection(stdout, in, inv.flags.format) }, in.Holder != "")
}

// inspected is the exit status of an inspection that returned err and
// found a holder (or a leader) or not, once write wrote what it read: 2 for
// a bad argument (nothing written), 1 when a majority could not be read or
// the output failed, 3 when nobody holds it, else 0.
func inspected(stderr io.Writer, err error, write func() error, found bool) int {
	if errors.Is(err, redlock.ErrInvalidArgument) || errors.Is(err, leadership.ErrInvalidArgument) {
		fmt.Fprintf(stderr, "redlock-bench inspect: %s\n", oneLine(err))
		return exitUsage
	}
	if werr := write(); werr != nil {
		fmt.Fprintf(stderr, "redlock-bench inspect: %s\n", oneLine(werr))
		return exitError
	}
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "redlock-bench inspect: %s\n", oneLine(err))
		return exitError
	case !found:
		return exitNotHeld
	}
	return exitOK
}

// inspectedKey is a master's key as inspect prints it in JSON.
type inspectedKey struct {
	Addr      string `json:"addr"`
	Token     string `json:"token"`
	TTLms     int64  `json:"ttl_ms"` // -1: no expiry; 0: no key
	WrongType bool   `json:"wrong_type,omitempty"`
	Queued    int64  `json:"queued"`
	Head      string `json:"head,omitempty"`
	HeadClaim string `json:"head_claim,omitempty"`
	Error     string `json:"error,omitempty"`
}

func writeInspection(w io.Writer, in redlock.Inspection, format string) error {
	keys := make([]inspectedKey, len(in.Masters))
	for i, k := range in.Masters {
		keys[i] = inspectedKey{Addr: k.Addr, Token: k.Token, TTLms: k.TTL.Milliseconds(), WrongType: k.WrongType,
			Queued: k.Queued, Head: k.Head, HeadClaim: k.HeadClaim}
		if k.TTL < 0 {
			keys[i].TTLms = -1
		}
		if k.Err != nil {
			keys[i].Error = oneLine(k.Err)
		}
	}
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		var f *uint64
		if in.FenceKnown {
			f = &in.Fence
		}
		return enc.Encode(struct {
			Resource string         `json:"resource"`
			Holder   string         `json:"holder"`
			Fence    *uint64        `json:"fence,omitempty"`
			Masters  []inspectedKey `json:"masters"`
		}{in.Resource, in.Holder, f, keys})
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MASTER\tTOKEN\tTTL\tQUEUED\tHEAD\tNOTE")
	for _, k := range keys {
		token, ttl, note := k.Token, (time.Duration(k.TTLms) * time.Millisecond).String(), ""
		switch {
		case k.Error != "":
			token, ttl, note = "?", "?", k.Error
		case k.WrongType:
			token, note = "-", "a key of another type"
		case token == "":
			token, ttl = "-", "-"
		case token == "q":
			note = "kept for the fair queue's head"
		case k.TTLms < 0:
			ttl = "none"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", k.Addr, token, ttl, k.Queued, dash(k.Head), note)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "holder: %s\n", dash(in.Holder)); err != nil {
		return err
	}
	var err error
	switch {
	case in.FenceErr != nil:
		_, err = fmt.Fprintf(w, "fence: ? (%s)\n", oneLine(in.FenceErr))
	case in.FenceKnown:
		_, err = fmt.Fprintf(w, "fence: %d (the last minted)\n", in.Fence)
	}
	return err
}

// forceRelease is release -force up to its outcome: the inspection it
// acts on is printed first (in text), and a holder on a majority or an
// inspection that failed stops it with code.
func forceRelease(ctx context.Context, inv *opsInvocation, client *redlock.Client, stdout, stderr io.Writer) (int, error, int) {
	in, err := client.Inspect(ctx, inv.resource)
	if errors.Is(err, redlock.ErrInvalidArgument) {
		fmt.Fprintf(stderr, "redlock-bench release: %s\n", oneLine(err))
		return 0, nil, exitUsage
	}
	if inv.flags.format != "json" {
		fmt.Fprintln(stdout, "seen:")
		_ = writeInspection(stdout, in, "text")
	}
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "redlock-bench release: the inspection failed, nothing released: %s\n", oneLine(err))
		return 0, nil, exitError
	case in.Holder != "":
		fmt.Fprintf(stderr, "redlock-bench release: %s holds a majority: nothing released (release it with -token if its holder is gone)\n", in.Holder)
		return 0, nil, exitError
	}
	n, err := client.ForceRelease(ctx, in)
	return n, err, exitOK
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// runRelease is `redlock-bench release`.
func runRelease(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runOps("release", args, stderr, func(inv *opsInvocation, client *redlock.Client) int {
		return release(ctx, inv, client, stdout, stderr)
	})
}

func release(ctx context.Context, inv *opsInvocation, client *redlock.Client, stdout, stderr io.Writer) int {
	var n int
	var err error
	if inv.force {
		var code int
		if n, err, code = forceRelease(ctx, inv, client, stdout, stderr); code != exitOK {
			return code
		}
	} else {
		n, err = client.Release(ctx, inv.resource, inv.token)
	}
	if errors.Is(err, redlock.ErrInvalidArgument) {
		fmt.Fprintf(stderr, "redlock-bench release: %s\n", oneLine(err))
		return exitUsage
	}
	if inv.flags.format == "json" {
		out := struct {
			Released int    `json:"released"`
			Masters  int    `json:"masters"`
			Error    string `json:"error,omitempty"`
		}{n, len(inv.masters), ""}
		if err != nil {
			out.Error = oneLine(err)
		}
		_ = json.NewEncoder(stdout).Encode(out)
	} else {
		fmt.Fprintf(stdout, "released on %d of %d masters\n", n, len(inv.masters))
	}
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "redlock-bench release: %s\n", oneLine(err))
		return exitError
	case n == 0:
		return exitNotHeld
	}
	return exitOK
}

// inspectRole is `redlock-bench inspect -role`: the term of a leadership
// role (leadership.Inspect), exit 0 when a majority names a leader.
func inspectRole(ctx context.Context, inv *opsInvocation, client *redlock.Client, stdout, stderr io.Writer) int {
	in, err := leadership.Inspect(ctx, client, inv.role)
	return inspected(stderr, err, func() error { return writeTerm(stdout, in, inv.flags.format) }, in.Leading)
}

// termMaster is a master's part of a term as inspect -role prints it in JSON.
type termMaster struct {
	Addr          string `json:"addr"`
	Token         string `json:"token"`
	TTLms         int64  `json:"ttl_ms"` // -1: no expiry; 0: no key
	Identity      string `json:"identity,omitempty"`
	RecordToken   string `json:"record_token,omitempty"`
	TermFence     uint64 `json:"term_fence,omitempty"`
	RecordCurrent bool   `json:"record_current"`
	Error         string `json:"error,omitempty"`
}

func writeTerm(w io.Writer, in leadership.TermInspection, format string) error {
	masters := make([]termMaster, len(in.Lock.Masters))
	for i, k := range in.Lock.Masters {
		m := termMaster{Addr: k.Addr, Token: k.Token, TTLms: k.TTL.Milliseconds()}
		if k.TTL < 0 {
			m.TTLms = -1
		}
		var errs []string
		if k.Err != nil {
			errs = append(errs, oneLine(k.Err))
		}
		if i < len(in.Records) {
			r := in.Records[i]
			m.Identity, m.RecordToken, m.TermFence, m.RecordCurrent = r.Identity, r.Token, r.Fence, r.Current
			if r.Err != nil {
				errs = append(errs, oneLine(r.Err))
			}
		}
		m.Error = strings.Join(errs, "; ")
		masters[i] = m
	}
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		type leader struct {
			Identity string `json:"identity"`
			Fence    uint64 `json:"fence"`
		}
		var l *leader
		if in.Leading {
			l = &leader{in.Leader.Identity, in.Leader.Fence}
		}
		var f *uint64
		if in.Lock.FenceKnown {
			f = &in.Lock.Fence
		}
		return enc.Encode(struct {
			Role         string       `json:"role"`
			Resource     string       `json:"resource"`
			Leading      bool         `json:"leading"`
			Leader       *leader      `json:"leader,omitempty"`
			Holder       string       `json:"holder"`
			FenceCounter *uint64      `json:"fence_counter,omitempty"`
			Masters      []termMaster `json:"masters"`
		}{in.Role, in.Lock.Resource, in.Leading, l, in.Lock.Holder, f, masters})
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MASTER\tTOKEN\tTTL\tIDENTITY\tTERM FENCE\tNOTE")
	for _, m := range masters {
		token, ttl, identity, termFence, note := m.Token, (time.Duration(m.TTLms) * time.Millisecond).String(), dash(m.Identity), "-", ""
		if m.RecordToken != "" {
			termFence = strconv.FormatUint(m.TermFence, 10)
		}
		switch {
		case m.Error != "":
			note = m.Error
		case token == "":
			token, ttl = "-", "-"
		case m.TTLms < 0:
			ttl = "none"
		}
		if m.Error == "" && m.RecordToken != "" && !m.RecordCurrent {
			note = "the record names another token: an earlier term's"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m.Addr, token, ttl, identity, termFence, note)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var err error
	if in.Leading {
		_, err = fmt.Fprintf(w, "leader: %s (term fence %d)\n", in.Leader.Identity, in.Leader.Fence)
	} else {
		_, err = fmt.Fprintf(w, "leader: - (no majority names one)\n")
	}
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "holder: %s\n", dash(in.Lock.Holder)); err != nil {
		return err
	}
	switch {
	case in.Lock.FenceErr != nil:
		_, err = fmt.Fprintf(w, "fence counter: ? (%s)\n", oneLine(in.Lock.FenceErr))
	case in.Lock.FenceKnown:
		_, err = fmt.Fprintf(w, "fence counter: %d (the last minted)\n", in.Lock.Fence)
	}
	return err
}
