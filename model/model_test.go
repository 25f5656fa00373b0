package model

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// check is one run of SPIN on a model: the defines it is generated with,
// pan's flags, and whether pan must find an error (a bug, or the case
// without the timing assumption) or none (a property that must hold).
type check struct {
	name    string
	model   string
	defines []string
	pan     []string // besides -m; -a -f for LTL under weak fairness
	fail    bool
}

// checks are the bounds of make test (docs/model.md): redlock.pml with 3
// masters and 2 clients, 1 acquisition each over 6 ticks (4 with Extend or
// a restart), time stopped where releases are checked (2 acquisitions each
// for the bugs, 1 where none must be found; make model runs 2); fence.pml
// with 2 processes of 3 mints and 2 losses; fair.pml with 3 waiters over 6
// ticks.
var checks = []check{
	{"a: one holder at a time with the timing assumptions", "redlock.pml", []string{"CYCLES=1"}, nil, false},
	{"a: with a suspend of a client's machine", "redlock.pml", []string{"CYCLES=1", "SUSPEND"}, nil, false},
	{"a: with Extend", "redlock.pml", []string{"CYCLES=1", "EXTEND", "EXACT_CLOCKS", "TMAX=4"}, nil, false},
	{"a: with a master restarted empty and the restart guard", "redlock.pml", []string{"CYCLES=1", "RESTART", "EXACT_CLOCKS", "TMAX=4"}, nil, false},
	{"b: without the timing assumptions, (a) fails", "redlock.pml", []string{"CYCLES=1", "PAUSE"}, nil, true},
	{"b: with pauses, the store never accepts a fence below one it accepted", "redlock.pml", []string{"CYCLES=1", "PAUSE", "NO_MUTEX"}, nil, false},
	{"b: the stale write is refused (Kleppmann's scenario)", "redlock.pml", []string{"CYCLES=1", "PAUSE", "NO_MUTEX", "NO_REFUSAL"}, nil, true},
	{"b: a store that compares no fence accepts the stale write", "redlock.pml", []string{"CYCLES=1", "PAUSE", "NO_MUTEX", "UNGUARDED"}, nil, true},
	{"e: no key of a lost attempt survives its releases", "redlock.pml", []string{"CYCLES=1", "INFLIGHT", "TMAX=0"}, nil, false},
	{"e: nor of a failed Extend", "redlock.pml", []string{"CYCLES=1", "INFLIGHT", "EXTEND", "TMAX=0"}, nil, false},
	{"c: no fence twice across a lost key", "fence.pml", nil, nil, false},
	{"d: the fair policy: one holder at a time", "fair.pml", nil, nil, false},
	{"d: a waiter that claimed is never passed the lock in-process", "fair.pml", []string{"CLAIM"}, nil, false},
	{"d: a waiter gets the lock after the release, under weak fairness", "fair.pml", []string{"LIVE", "TMAX=0"}, []string{"-a", "-f"}, false},
	{"d: without weak fairness it may not", "fair.pml", []string{"LIVE", "TMAX=0"}, []string{"-a"}, true},

	// The re-injected bugs (internal/bugs and the project's history).
	{"bug: drift added instead of subtracted", "redlock.pml", []string{"CYCLES=1", "BUG_DRIFT_ADDED"}, nil, true},
	{"bug: lease counted from the round's end", "redlock.pml", []string{"CYCLES=1", "BUG_LEASE_FROM_ROUND_END"}, nil, true},
	{"bug: the lease on the monotonic clock alone", "redlock.pml", []string{"CYCLES=1", "SUSPEND", "BUG_MONOTONIC_LEASE_ONLY"}, nil, true},
	{"bug: no restart guard", "redlock.pml", []string{"CYCLES=1", "RESTART", "EXACT_CLOCKS", "TMAX=4", "BUG_NO_RESTART_GUARD"}, nil, true},
	{"bug: a release that got no reply not tried again", "redlock.pml", []string{"CYCLES=2", "INFLIGHT", "TMAX=0", "BUG_NO_RELEASE_RETRY"}, nil, true},
	{"bug: a lost attempt's cleanup on the caller's context", "redlock.pml", []string{"CYCLES=2", "INFLIGHT", "TMAX=0", "BUG_CLEANUP_ON_CALLER_CTX"}, nil, true},
	{"bug: a failed Extend that releases nothing", "redlock.pml", []string{"CYCLES=1", "INFLIGHT", "EXTEND", "TMAX=0", "BUG_EXTEND_KEEPS_KEYS"}, nil, true},
	{"bug: the counter restarts without its floor", "fence.pml", []string{"BUG_COUNTER_WITHOUT_FLOOR"}, nil, true},
	{"bug: a lost lock passed on in-process", "fair.pml", []string{"BUG_PASS_LOST"}, nil, true},
	{"bug: Done asked for after the lease ran out, left open", "redlock.pml", []string{"CYCLES=1", "BUG_DONE_LATE_AFTER_LEASE"}, nil, true},
	{"bug: Extend's outcome decided by whether Done was asked for", "redlock.pml", []string{"CYCLES=1", "EXTEND", "EXACT_CLOCKS", "TMAX=4", "BUG_EXTEND_OUTCOME_ON_DONE"}, nil, true},
	{"bug: a claim that races an in-process pass", "fair.pml", []string{"CLAIM", "BUG_CLAIM_RACE"}, nil, true},
}

// namedSteps are the bugs whose counterexample the Checker must reject at a
// step of one kind, for one rule: the step the bug takes.
var namedSteps = map[string]struct {
	kind Kind
	rule string
}{
	"bug: a lost lock passed on in-process":      {Pass, "(pass) a lock that had ended passed on in-process"},
	"bug: a claim that races an in-process pass": {Hand, "(claim)"},
}

var (
	errorsRe = regexp.MustCompile(`errors: (\d+)`)
	statesRe = regexp.MustCompile(`(\d+) states, stored`)
	timeRe   = regexp.MustCompile(`pan: elapsed time ([\d.e+]+) seconds`)
)

// slots bounds the runs of spin, gcc and pan of this package's tests to
// two at a time (the machine's cores): TestModel and
// TestCheckerAcceptsSimulations run in parallel and share them, so that
// the simulations fill a core that TestModel's last long search leaves idle.
var slots = make(chan struct{}, 2)

// TestModel generates, compiles and runs pan for every check, two at a
// time, each bounded by -DMEMLIM and a timeout.
func TestModel(t *testing.T) {
	t.Parallel()
	spin, gcc := tools(t)
	var wg sync.WaitGroup
	for _, c := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			t.Run(c.name, func(t *testing.T) { run(t, spin, gcc, c) })
		}()
	}
	wg.Wait()
}

// tools finds spin and gcc: under CI a missing one fails the test,
// elsewhere it skips (make deps installs both).
func tools(t *testing.T) (spin, gcc string) {
	var missing []string
	spin, err := exec.LookPath("spin")
	if err != nil {
		missing = append(missing, "spin")
	}
	gcc, err = exec.LookPath("gcc")
	if err != nil {
		if gcc, err = exec.LookPath("cc"); err != nil {
			missing = append(missing, "gcc")
		}
	}
	if len(missing) > 0 {
		msg := "model: missing " + strings.Join(missing, " and ") + " (make deps, or apt-get install spin gcc)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return spin, gcc
}

// run is one check in a directory of its own.
func run(t *testing.T, spin, gcc string, c check) {
	dir := t.TempDir()
	src, err := os.ReadFile(c.model)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, c.model), src, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sh := func(name string, args ...string) string {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil && name != "./pan" {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	var defs []string
	for _, d := range c.defines {
		defs = append(defs, "-D"+d)
	}
	sh(spin, append(append([]string{"-a"}, defs...), c.model)...)
	// A search that must fail, or of fair.pml, is small: compiling pan
	// unoptimised saves more than the search loses.
	opt := "-O1"
	if c.fail || c.model == "fair.pml" {
		opt = "-O0"
	}
	cflags := []string{opt, "-w", "-DMEMLIM=1024", "-o", "pan", "pan.c"}
	if len(c.pan) == 0 {
		cflags = append([]string{"-DSAFETY"}, cflags...)
	}
	sh(gcc, cflags...)
	start := time.Now()
	out := sh("./pan", append([]string{"-m200000"}, c.pan...)...)
	took := time.Since(start)
	m := errorsRe.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("pan printed no error count:\n%s", out)
	}
	n, _ := strconv.Atoi(m[1])
	states := ""
	if s := statesRe.FindStringSubmatch(out); s != nil {
		states = s[1]
	}
	t.Logf("%s %s: errors %d, %s states stored, %v", c.model, strings.Join(c.defines, " "), n, states, took.Round(time.Millisecond))
	switch {
	case c.fail && n == 0:
		t.Fatalf("SPIN found no counterexample, and must:\n%s", out)
	case !c.fail && n > 0:
		t.Fatalf("SPIN found a counterexample:\n%s\n%s", out, strings.Join(steps(t, ctx, spin, dir, c, defs), "\n"))
	case !c.fail && (strings.Contains(out, "Search not completed") || strings.Contains(out, "reached -DMEMLIM")):
		t.Fatalf("the search did not complete:\n%s", out)
	case c.fail && testing.Verbose():
		t.Logf("the counterexample:\n%s", strings.Join(steps(t, ctx, spin, dir, c, defs), "\n"))
	}
	if c.fail {
		// The Checker (check.go) replays the counterexample: a bug's, or an
		// unguarded store's, is a run the model without the switch cannot
		// produce; the pause's is one it can, once pauses are allowed.
		err := replayed(t, ctx, spin, dir, c, defs)
		bug := strings.HasPrefix(c.name, "bug:") || slices.Contains(c.defines, "UNGUARDED")
		switch {
		case bug && err == nil:
			t.Fatalf("the Checker accepts the counterexample of a bug")
		case !bug && err != nil:
			t.Fatalf("the Checker rejects a counterexample the model produces: %v", err)
		case err != nil:
			t.Logf("the Checker: %v", err)
		}
		if want, ok := namedSteps[c.name]; ok {
			var r *Rejection
			if !errors.As(err, &r) || r.Event.Kind != want.kind || !strings.Contains(r.Rule, want.rule) {
				t.Fatalf("the Checker: %v; want the %v step rejected: %s", err, want.kind, want.rule)
			}
		}
	}
}

// steps replays the trail pan wrote.
func steps(t *testing.T, ctx context.Context, spin, dir string, c check, defs []string) []string {
	cmd := exec.CommandContext(ctx, spin, append(append([]string{"-t", "-p"}, defs...), c.model)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Logf("spin -t: %v", err)
	}
	return Steps(string(out))
}

// TestSteps checks the trail's reading on a line of each kind.
func TestSteps(t *testing.T) {
	trail := "  6:\tproc  4 (Client:1) redlock.pml:231 (state 40)\t[ctr = (ctr+1)]\n" +
		"  7:\tproc  0 (Env:1) redlock.pml:98 (state 1)\t[now = (now+1)]\n" +
		"  8:\tproc  4 (Client:1) redlock.pml:232 (state 41)\t[i = 0]\n"
	got := Steps(trail)
	want := []string{
		"1. Client 4 (line 231): won a majority with validity left; mint.lua gives the fence (Client.mint)   [ctr = (ctr+1)]",
		"2. Env 0 (line 98): clock: one tick (keys whose TTL ran out expire)   [now = (now+1)]",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("Steps:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
