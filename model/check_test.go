package model

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// pmlConfig is the Checker's view of a model: one tick a time unit, TTL 3,
// drift 1; 3 masters, but fair.pml's one key (the quorum abstracted), whose
// queue entries never expire.
func pmlConfig(model string, defines []string) Config {
	if model == "fair.pml" {
		return Config{Masters: 1, TTL: 3, Drift: 1}
	}
	return Config{Masters: 3, TTL: 3, Drift: 1, Pauses: slices.Contains(defines, "PAUSE")}
}

// parseEvents reads the "EV" lines that the models print in a simulation or
// a trail's replay (spin -T): "EV set at=0 c=0 m=1 tok=1 ok=1".
func parseEvents(out string) ([]Event, error) {
	var evs []Event
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "EV" {
			continue
		}
		k := Kind(slices.Index(kindNames[:], f[1]))
		if k <= 0 {
			return nil, fmt.Errorf("unknown step %q in %q", f[1], line)
		}
		e := Event{Kind: k}
		for _, kv := range f[2:] {
			name, v, ok := strings.Cut(kv, "=")
			n, err := strconv.ParseUint(v, 10, 64)
			if !ok || err != nil {
				return nil, fmt.Errorf("bad field %q in %q", kv, line)
			}
			switch name {
			case "at":
				e.At = time.Duration(n)
			case "mono":
				e.Mono = time.Duration(n)
			case "c":
				e.Client = int(n)
			case "m":
				e.Master = int(n)
			case "tok":
				e.Token = v
			case "ok":
				e.Ok = n == 1
			case "fence":
				e.Fence = n
			case "until":
				e.Until = time.Duration(n)
			case "clock":
				e.Clock = n
			case "w":
				e.Waiter = v
			case "from":
				e.From = v
			case "stamp":
				e.Stamp = n
			case "claim":
				e.Claim = n == 1
			default:
				return nil, fmt.Errorf("unknown field %q in %q", name, line)
			}
		}
		evs = append(evs, e)
	}
	return evs, nil
}

// replayed replays the trail pan wrote in dir through the Checker: nil when
// it accepts the steps, the rejection otherwise.
func replayed(t *testing.T, ctx context.Context, spin, dir string, c check, defs []string) error {
	cmd := exec.CommandContext(ctx, spin, append(append([]string{"-t", "-T"}, defs...), c.model)...)
	cmd.Dir = dir
	out, _ := cmd.CombinedOutput()
	evs, err := parseEvents(string(out))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) == 0 {
		t.Fatalf("the trail printed no steps:\n%s", out)
	}
	return Check(pmlConfig(c.model, c.defines), evs)
}

// simulations are the models' switches whose random simulations the Checker
// must accept, step by step.
var simulations = []struct {
	model   string
	defines []string
}{
	{"redlock.pml", []string{"CYCLES=2"}},
	{"redlock.pml", []string{"CYCLES=2", "SUSPEND"}},
	{"redlock.pml", []string{"CYCLES=2", "EXTEND"}},
	{"redlock.pml", []string{"CYCLES=2", "RESTART"}},
	{"redlock.pml", []string{"CYCLES=2", "INFLIGHT"}},
	{"redlock.pml", []string{"CYCLES=2", "INFLIGHT", "EXTEND", "RESTART"}},
	{"redlock.pml", []string{"CYCLES=2", "PAUSE", "NO_MUTEX"}},
	{"redlock.pml", []string{"CYCLES=2", "PAUSE", "SUSPEND", "EXTEND"}},
	{"fence.pml", nil},
	{"fence.pml", []string{"MINTS=4", "LOSSES=3"}},
	{"fair.pml", nil},
	{"fair.pml", []string{"CLAIM"}},
	{"fair.pml", []string{"CLAIM", "TMAX=8"}},
}

// TestCheckerAcceptsSimulations has SPIN play random runs of the models
// (spin -n seed) and the Checker replay each: every step must be one the
// Checker's rules allow, and together the runs must take every kind of step,
// so that no rule is left untried.
func TestCheckerAcceptsSimulations(t *testing.T) {
	t.Parallel()
	spin, _ := tools(t)
	// A directory per pair of runs: spin writes pan.pre next to the model.
	dirs := make(chan string, 2)
	for range cap(dirs) {
		dir := t.TempDir()
		for _, m := range []string{"redlock.pml", "fence.pml", "fair.pml"} {
			src, err := os.ReadFile(m)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, m), src, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		dirs <- dir
	}
	const seeds = 12
	var (
		mu    sync.Mutex
		kinds = make(map[Kind]int)
		wg    sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, s := range simulations {
		var defs []string
		for _, d := range s.defines {
			defs = append(defs, "-D"+d)
		}
		for seed := 1; seed <= seeds; seed++ {
			wg.Go(func() {
				dir := <-dirs
				defer func() { dirs <- dir }()
				slots <- struct{}{}
				defer func() { <-slots }()
				args := append(append([]string{"-T", "-n" + strconv.Itoa(seed), "-u20000"}, defs...), s.model)
				cmd := exec.CommandContext(ctx, spin, args...)
				cmd.Dir = dir
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Errorf("spin %s: %v\n%s", strings.Join(args, " "), err, out)
					return
				}
				evs, err := parseEvents(string(out))
				if err != nil {
					t.Error(err)
					return
				}
				if err := Check(pmlConfig(s.model, s.defines), evs); err != nil {
					t.Errorf("spin %s: the Checker rejects SPIN's own run: %v\n%s", strings.Join(args, " "), err, out)
				}
				mu.Lock()
				for _, e := range evs {
					kinds[e.Kind]++
				}
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	for k := Round; k <= Ended; k++ {
		if k == Leave || k == Queue {
			continue // steps of the code's scripts that fair.pml does not model (fair_leave.lua, fair_undo.lua)
		}
		if kinds[k] == 0 {
			t.Errorf("no simulation took a %v step: its rule is untried", k)
		}
	}
	t.Logf("%d simulations, steps by kind: %v", len(simulations)*seeds, kinds)
}

// TestCheckerRejects feeds the Checker short traces, each one step off a
// run the model can produce, and requires the rejection to name that step.
func TestCheckerRejects(t *testing.T) {
	cfg := Config{Masters: 3, TTL: 3, Drift: 1}
	// Client 0 wins on masters 0 and 1 at 0 with fence 1, works, writes, releases.
	good := []Event{
		{Kind: Round, At: 0, Client: 0, Token: "a"},
		{Kind: Set, At: 0, Client: 0, Master: 0, Token: "a", Ok: true},
		{Kind: SetReply, At: 0, Client: 0, Master: 0, Token: "a", Ok: true},
		{Kind: Set, At: 0, Client: 0, Master: 1, Token: "a", Ok: true},
		{Kind: SetReply, At: 0, Client: 0, Master: 1, Token: "a", Ok: true},
		{Kind: Mint, At: 0, Client: 0, Fence: 7, Clock: 7},
		{Kind: MintReply, At: 0, Client: 0, Fence: 7},
		{Kind: Won, At: 0, Client: 0, Token: "a", Until: 2, Fence: 7},
		{Kind: Enter, At: 1, Mono: 1, Client: 0, Token: "a"},
		{Kind: Write, At: 1, Client: 0, Fence: 7, Ok: true},
		{Kind: Release, At: 1, Client: 0, Master: 0, Token: "a", Ok: true},
		{Kind: Release, At: 1, Client: 0, Master: 1, Token: "a", Ok: true},
		{Kind: Released, At: 1, Client: 0, Token: "a"},
	}
	if err := Check(cfg, good); err != nil {
		t.Fatalf("the good trace: %v", err)
	}
	for _, tc := range []struct {
		name string
		step int // 1-based, in the mutated trace
		edit func([]Event) []Event
		rule string
	}{
		{"a key set on a master that holds another token", 3, func(evs []Event) []Event {
			return slices.Insert(evs, 2, Event{Kind: Set, At: 0, Client: 1, Master: 0, Token: "b", Ok: true})
		}, "setKey"},
		{"a lease longer than TTL - drift", 8, func(evs []Event) []Event { evs[7].Until = 3; return evs }, "Client.lease"},
		{"won on one master", 8, func(evs []Event) []Event { evs[4].Ok = false; return evs }, "fewer than a majority"},
		{"work past the lease's end", 9, func(evs []Event) []Event { evs[8].At, evs[8].Mono = 2, 2; return evs }, "after its lease ran out"},
		{"a fence not minted for the round", 8, func(evs []Event) []Event { evs[7].Fence = 6; return evs }, "not the one Client.mint got"},
		{"a missing counter key set below the node's clock", 6, func(evs []Event) []Event { evs[5].Clock = 9; return evs }, "the floor"},
		{"a key left after the releases", 12, func(evs []Event) []Event { return slices.Delete(evs, 11, 12) }, "(e)"},
		{"a write refused although newer", 10, func(evs []Event) []Event { evs[9].Ok = false; return evs }, "refused fence"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(cfg, tc.edit(slices.Clone(good)))
			var r *Rejection
			if !errors.As(err, &r) || !errors.Is(err, ErrRejected) {
				t.Fatalf("Check = %v, want a *Rejection", err)
			}
			if r.Step != tc.step || !strings.Contains(r.Rule, tc.rule) {
				t.Fatalf("rejected step %d (%s), want step %d (%s)", r.Step, r.Rule, tc.step, tc.rule)
			}
		})
	}
}

// TestCheckerZero: the zero Checker checks a run with no masters: a
// master's step is rejected, a round is not.
func TestCheckerZero(t *testing.T) {
	var c Checker
	if err := c.Step(Event{Kind: Round, Token: "a"}); err != nil {
		t.Fatalf("round: %v", err)
	}
	var r *Rejection
	if err := c.Step(Event{Kind: Set, Token: "a", Ok: true}); !errors.As(err, &r) || r.Step != 2 || !strings.Contains(r.Rule, "no master 0") {
		t.Fatalf("set on master 0 = %v, want step 2 rejected: no master 0", err)
	}
}

// TestCheckerRejectsFair feeds the Checker a fair run on one master and
// one-step mutations of it, each rejected at that step: X1 (client 0) holds
// the key, Y (client 1, waiter y) and X's second waiter x2 queue with
// claims, X1's release hands the key to the head y, y works and unlocks; X1
// had passed nothing.
func TestCheckerRejectsFair(t *testing.T) {
	cfg := Config{Masters: 1, TTL: 3, Drift: 1, EntryTTL: 10, EntryDrift: 1}
	good := []Event{
		{Kind: Round, At: 0, Client: 0, Token: "a"},
		{Kind: Set, At: 0, Client: 0, Token: "a", Waiter: "x1", Stamp: 1, Ok: true},
		{Kind: SetReply, At: 0, Client: 0, Token: "a", Ok: true},
		{Kind: Won, At: 0, Client: 0, Token: "a", Until: 2},
		{Kind: Round, At: 0, Client: 1, Token: "b"},
		{Kind: Set, At: 0, Client: 1, Token: "b", Waiter: "y", Stamp: 2, Claim: true},
		{Kind: Round, At: 0, Client: 0, Token: "c"},
		{Kind: Set, At: 0, Client: 0, Token: "c", Waiter: "x2", Stamp: 3, Claim: true},
		{Kind: Enter, At: 1, Mono: 1, Client: 0, Token: "a"},
		{Kind: Unlock, At: 1, Mono: 1, Client: 0, Token: "a"},
		{Kind: Hand, At: 1, Client: 0, From: "a", Waiter: "y", Token: "b"},
		{Kind: SetReply, At: 1, Client: 1, Token: "b", Ok: true},
		{Kind: Won, At: 1, Mono: 1, Client: 1, Token: "b", Until: 2},
		{Kind: Enter, At: 1, Mono: 1, Client: 1, Token: "b"},
		{Kind: Unlock, At: 1, Mono: 1, Client: 1, Token: "b"},
	}
	if err := Check(cfg, good); err != nil {
		t.Fatalf("the good trace: %v", err)
	}
	for _, tc := range []struct {
		name string
		step int // 1-based, in the mutated trace
		edit func([]Event) []Event
		rule string
	}{
		{"a key handed to a waiter that is not the queue's head", 11, func(evs []Event) []Event {
			evs[10].Waiter, evs[10].Token = "x2", "c"
			return evs
		}, "(order) master 0's key handed to x2, not the queue's head: y"},
		{"a key handed on by a release of a token it does not hold", 11, func(evs []Event) []Event {
			evs[10].From = "c"
			return evs
		}, "(handoff)"},
		{"a key handed to a token that is not the head's claim", 11, func(evs []Event) []Event {
			evs[10].Token = "z"
			return evs
		}, "not its claim"},
		{"fair_lock.lua taking the key for a waiter behind the head", 12, func(evs []Event) []Event {
			return slices.Insert(evs[:10], 10, Event{Kind: Release, At: 1, Client: 0, Token: "a", Ok: true},
				Event{Kind: Set, At: 1, Client: 0, Token: "c", Waiter: "x2", Ok: true})
		}, "(order) fair_lock.lua took master 0's key for x2"},
		{"an in-process pass of a lock that had ended", 11, func(evs []Event) []Event {
			return slices.Insert(evs[:10], 9, Event{Kind: Ended, At: 1, Client: 0, Token: "a"},
				Event{Kind: Pass, At: 1, Mono: 1, Client: 0, Token: "a", Waiter: "x2"})
		}, "(pass) a lock that had ended"},
		{"an in-process pass after the lease ran out", 11, func(evs []Event) []Event {
			return append(evs[:10], Event{Kind: Pass, At: 2, Mono: 2, Client: 0, Token: "a", Waiter: "x2"})
		}, "(pass) a lock passed on in-process after its lease ran out"},
		{"an in-process pass to another client", 11, func(evs []Event) []Event {
			return append(evs[:10], Event{Kind: Pass, At: 1, Mono: 1, Client: 1, Token: "a", Waiter: "y"})
		}, "that its client does not hold"},
		{"a claim taking a key after its waiter took a pass", 14, func(evs []Event) []Event {
			// X1 passes to x2 in-process; x2 works, unlocks and releases:
			// the release hands the key to the head y, then y's to x2's
			// claim, which no longer waits.
			return append(evs[:10],
				Event{Kind: Pass, At: 1, Mono: 1, Client: 0, Token: "a", Waiter: "x2"},
				Event{Kind: Won, At: 1, Mono: 1, Client: 0, Token: "a", Until: 2},
				Event{Kind: Hand, At: 1, Client: 0, From: "a", Waiter: "y", Token: "b"},
				Event{Kind: Hand, At: 1, Client: 1, From: "b", Waiter: "x2", Token: "c"})
		}, "(claim)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(cfg, tc.edit(slices.Clone(good)))
			var r *Rejection
			if !errors.As(err, &r) {
				t.Fatalf("Check = %v, want a *Rejection", err)
			}
			if r.Step != tc.step || !strings.Contains(r.Rule, tc.rule) {
				t.Fatalf("rejected step %d (%s), want step %d (%s)", r.Step, r.Rule, tc.step, tc.rule)
			}
		})
	}
}
