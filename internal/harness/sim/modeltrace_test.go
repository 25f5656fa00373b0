package sim

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"

	"quorumlock.dev/clockdrift"
	"quorumlock.dev/model"
)

// modelTraceSeeds is the sample of make test: seeds 1 to this.
const modelTraceSeeds = 64

// toModel converts a recorded trace into the model checker's steps.
func toModel(t *testing.T, tr ModelTrace) (model.Config, []model.Event) {
	kinds := make(map[string]model.Kind)
	for k := model.Round; k <= model.Released; k++ {
		kinds[k.String()] = k
	}
	cfg := model.Config{Masters: modelMasters, TTL: tr.TTL, Drift: clockdrift.Allowance(tr.TTL, tr.DriftFactor, tr.DriftConstant),
		Pauses: tr.Pauses, Wire: tr.Wire, GuardLag: tr.GuardLag}
	evs := make([]model.Event, len(tr.Steps))
	for i, s := range tr.Steps {
		k, ok := kinds[s.Kind]
		if !ok {
			t.Fatalf("step %d: no model step %q", i+1, s.Kind)
		}
		evs[i] = model.Event{Kind: k, At: s.At, Mono: s.Mono, Client: s.Client, Master: s.Master, Token: s.Token, Ok: s.Ok,
			Fence: s.Fence, Until: s.Until, Clock: s.Clock}
	}
	return cfg, evs
}

func playModelTrace(t *testing.T, seed uint64) ModelTrace {
	var tr ModelTrace
	synctest.Test(t, func(t *testing.T) { tr = PlayModelTrace(seed) })
	if len(tr.Errors) > 0 {
		t.Fatalf("seed %d: %s", seed, strings.Join(tr.Errors, "; "))
	}
	return tr
}

// around prints the steps near the n-th (1-based).
func around(evs []model.Event, n int) string {
	var b strings.Builder
	for i := max(0, n-12); i < min(len(evs), n+2); i++ {
		mark := "  "
		if i == n-1 {
			mark = "> "
		}
		fmt.Fprintf(&b, "%s%4d %v\n", mark, i+1, evs[i])
	}
	return b.String()
}

// TestModelTrace plays the model-trace schedules of the sample and replays
// each trace through model.Checker, the rules of model/redlock.pml and
// fence.pml: a step the model cannot produce fails the test, named. The
// sample must take the steps that matter (wins, refused SET NX, Extends,
// fenced writes, releases), or it would check little.
func TestModelTrace(t *testing.T) {
	seen := make(map[model.Kind]int)
	refused, faults := 0, 0
	for seed := uint64(1); seed <= modelTraceSeeds; seed++ {
		tr := playModelTrace(t, seed)
		faults += len(tr.Faults)
		cfg, evs := toModel(t, tr)
		for _, e := range evs {
			seen[e.Kind]++
			if e.Kind == model.Set && !e.Ok {
				refused++
			}
		}
		if err := model.Check(cfg, evs); err != nil {
			var r *model.Rejection
			if errors.As(err, &r) {
				t.Errorf("seed %d (faults %v): %v\n%s", seed, tr.Faults, err, around(evs, r.Step))
			} else {
				t.Errorf("seed %d: %v", seed, err)
			}
		}
	}
	for _, k := range []model.Kind{model.Round, model.Set, model.SetReply, model.Release, model.Extend, model.Extended,
		model.Mint, model.MintReply, model.Won, model.Enter, model.Write, model.Released, model.Restart, model.CounterLost} {
		if seen[k] == 0 {
			t.Errorf("no schedule of the sample took a %v step", k)
		}
	}
	if refused == 0 {
		t.Errorf("no SET NX was refused in the sample: no contention")
	}
	t.Logf("%d schedules, %d faults, %d SET NX refused, steps by kind: %v", modelTraceSeeds, faults, refused, seen)
}

// TestModelTraceMutated proves that the tie can fail: a recorded trace,
// mutated by one step as a bug would, is rejected at that step.
func TestModelTraceMutated(t *testing.T) {
	// A trace with two fenced writes of different clients, no pause.
	var cfg model.Config
	var evs []model.Event
	for seed := uint64(1); seed <= modelTraceSeeds && evs == nil; seed++ {
		tr := playModelTrace(t, seed)
		c, e := toModel(t, tr)
		writers := make(map[int]bool)
		for _, x := range e {
			if x.Kind == model.Write && x.Ok {
				writers[x.Client] = true
			}
		}
		if !tr.Pauses && len(writers) == 2 && model.Check(c, e) == nil {
			cfg, evs = c, e
		}
	}
	if evs == nil {
		t.Fatal("no trace of the sample has writes of both clients")
	}
	find := func(evs []model.Event, k model.Kind, from int) int {
		return slices.IndexFunc(evs[from:], func(e model.Event) bool { return e.Kind == k }) + from
	}
	first := find(evs, model.Won, 0)
	second := find(evs, model.Won, first+1)
	if second <= first {
		t.Fatal("the trace has one win")
	}
	// A holder that wrote without an Extend: its lease ends a lease after its round.
	plain := slices.IndexFunc(evs, func(w model.Event) bool {
		return w.Kind == model.Won && !slices.ContainsFunc(evs, func(e model.Event) bool { return e.Kind == model.ExtendRound && e.Token == w.Token }) &&
			slices.ContainsFunc(evs, func(e model.Event) bool { return e.Kind == model.Write && e.Fence == w.Fence })
	})
	if plain < 0 {
		t.Fatal("no holder of the trace wrote without an Extend")
	}
	for _, tc := range []struct {
		name string
		edit func([]model.Event) ([]model.Event, int) // the mutated trace and its mutated step (0-based)
		rule string
	}{
		{"a fence reused", func(evs []model.Event) ([]model.Event, int) {
			evs[second].Fence = evs[first].Fence
			return evs, second
		}, "fence"},
		{"a key set on a master that held another token", func(evs []model.Event) ([]model.Event, int) {
			// Right after the first win, the other client's SET NX sets the
			// key on a master that the winner's SET NX had set.
			w := evs[first]
			m := evs[slices.IndexFunc(evs, func(e model.Event) bool { return e.Kind == model.Set && e.Ok && e.Token == w.Token })].Master
			return slices.Insert(evs, first+1, model.Event{Kind: model.Set, At: w.At, Client: 1 - w.Client, Master: m, Token: "intruder", Ok: true}), first + 1
		}, "setKey"},
		{"a lease used past its end", func(evs []model.Event) ([]model.Event, int) {
			// A holder's look at its lock, and its write, moved to the
			// instant its lease ends.
			w := evs[plain]
			enter := slices.IndexFunc(evs, func(e model.Event) bool { return e.Kind == model.Enter && e.Token == w.Token })
			write := slices.IndexFunc(evs, func(e model.Event) bool { return e.Kind == model.Write && e.Fence == w.Fence })
			if enter < 0 || write < 0 {
				t.Fatal("the holder did not write")
			}
			en, wr := evs[enter], evs[write]
			round := evs[slices.IndexFunc(evs, func(e model.Event) bool { return e.Kind == model.Round && e.Token == w.Token })]
			end := round.At + cfg.TTL - cfg.Drift
			en.Mono += end - en.At
			en.At, wr.At = end, end
			evs = slices.Delete(evs, write, write+1)
			evs = slices.Delete(evs, enter, enter+1)
			at := slices.IndexFunc(evs, func(e model.Event) bool { return e.At > end })
			if at < 0 {
				at = len(evs)
			}
			return slices.Insert(evs, at, en, wr), at
		}, "after its lease ran out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mutated, step := tc.edit(slices.Clone(evs))
			err := model.Check(cfg, mutated)
			var r *model.Rejection
			if !errors.As(err, &r) {
				t.Fatalf("Check = %v, want the mutated step %d rejected", err, step+1)
			}
			if r.Step != step+1 || !strings.Contains(r.Rule, tc.rule) {
				t.Fatalf("rejected step %d: %s; want step %d (%v) for %q\n%s", r.Step, r.Rule, step+1, mutated[step], tc.rule, around(mutated, r.Step))
			}
			t.Logf("%v", err)
		})
	}
}
