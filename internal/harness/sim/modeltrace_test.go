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
	for k := model.Round; k <= model.Ended; k++ {
		kinds[k.String()] = k
	}
	cfg := model.Config{Masters: modelMasters, TTL: tr.TTL, Drift: clockdrift.Allowance(tr.TTL, tr.DriftFactor, tr.DriftConstant),
		Pauses: tr.Pauses, Wire: tr.Wire, GuardLag: tr.GuardLag, EntryTTL: tr.EntryTTL, EntryDrift: tr.EntryDrift}
	evs := make([]model.Event, len(tr.Steps))
	for i, s := range tr.Steps {
		k, ok := kinds[s.Kind]
		if !ok {
			t.Fatalf("step %d: no model step %q", i+1, s.Kind)
		}
		evs[i] = model.Event{Kind: k, At: s.At, Mono: s.Mono, Client: s.Client, Master: s.Master, Token: s.Token, Ok: s.Ok,
			Fence: s.Fence, Until: s.Until, Clock: s.Clock, Waiter: s.Waiter, From: s.From, Stamp: s.Stamp, Claim: s.Claim}
	}
	return cfg, evs
}

func playModelTrace(t *testing.T, seed uint64) ModelTrace {
	return playWith(t, seed, PlayModelTrace)
}

func playWith(t *testing.T, seed uint64, play func(uint64) ModelTrace) ModelTrace {
	var tr ModelTrace
	synctest.Test(t, func(t *testing.T) { tr = play(seed) })
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

// fairModelTraceSeeds is the fair sample of make test: seeds 1 to this.
const fairModelTraceSeeds = 32

// TestModelTraceFair plays the fair model-trace schedules of the sample
// and replays each trace through model.Checker, with the rules of
// model/fair.pml: keys handed only to the queue's head by the holder's own
// release, in-process passes only of a lock that has not ended, no claim
// taking a key after its waiter took a pass. The sample must take the
// fair steps (hands to a claim and by handoff.lua, passes in-process,
// queued attempts), or it would check little.
func TestModelTraceFair(t *testing.T) {
	seen := make(map[model.Kind]int)
	claims, direct, queued, faults := 0, 0, 0, 0
	for seed := uint64(1); seed <= fairModelTraceSeeds; seed++ {
		tr := playWith(t, seed, PlayFairModelTrace)
		faults += len(tr.Faults)
		cfg, evs := toModel(t, tr)
		for _, e := range evs {
			seen[e.Kind]++
			switch {
			case e.Kind == model.Hand && e.Ok:
				direct++
			case e.Kind == model.Hand && e.Token != "q":
				claims++
			case e.Kind == model.Set && e.Waiter != "" && !e.Ok:
				queued++
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
	for _, k := range []model.Kind{model.Won, model.Enter, model.Write, model.Hand, model.Pass, model.Unlock} {
		if seen[k] == 0 {
			t.Errorf("no fair schedule of the sample took a %v step", k)
		}
	}
	if claims == 0 || direct == 0 || queued == 0 {
		t.Errorf("the sample handed %d keys to a claim, %d by handoff.lua, queued %d attempts: each must happen", claims, direct, queued)
	}
	t.Logf("%d fair schedules, %d faults, %d keys handed to a claim, %d by handoff.lua, %d attempts queued, steps by kind: %v",
		fairModelTraceSeeds, faults, claims, direct, queued, seen)
}

// TestModelTraceFairMutated proves that the fair rules can fail on a
// recorded trace: a key that a release handed to the queue's head's claim,
// handed instead to a waiter queued behind the head, and a lock passed
// in-process after a failed Extend ended it, are each rejected at that step.
func TestModelTraceFairMutated(t *testing.T) {
	type hand struct {
		cfg      model.Config
		evs      []model.Event
		at       int    // the hand's index
		to, tok  string // a waiter queued behind the head there, and its claim
		passedAt int    // a pass's index in evs, or -1
	}
	var behind, passed *hand
	for seed := uint64(1); seed <= fairModelTraceSeeds && (behind == nil || passed == nil); seed++ {
		cfg, evs := toModel(t, playWith(t, seed, PlayFairModelTrace))
		if model.Check(cfg, evs) != nil {
			continue
		}
		if passed == nil {
			if i := slices.IndexFunc(evs, func(e model.Event) bool { return e.Kind == model.Pass }); i >= 0 {
				passed = &hand{cfg: cfg, evs: evs, passedAt: i}
			}
		}
		if behind != nil {
			continue
		}
		// A hand to the head's claim, with another waiter's claim queued
		// on that master at a later stamp within the entry's TTL.
		for i, h := range evs {
			if h.Kind != model.Hand || h.Ok || h.Token == "q" {
				continue
			}
			var headStamp uint64
			claims := make(map[string]model.Event) // by waiter: its latest queued claim on h's master
			for _, e := range evs[:i] {
				if e.Kind == model.Set && e.Waiter != "" && e.Master == h.Master && h.At-e.At < cfg.EntryTTL-cfg.EntryDrift {
					if e.Waiter == h.Waiter {
						headStamp = e.Stamp
					}
					if !e.Ok && e.Claim {
						claims[e.Waiter] = e
					} else {
						delete(claims, e.Waiter)
					}
				}
				if (e.Kind == model.Hand || e.Kind == model.Leave) && e.Master == h.Master {
					delete(claims, e.Waiter)
				}
			}
			for w, e := range claims {
				if w != h.Waiter && headStamp != 0 && e.Stamp > headStamp {
					behind = &hand{cfg: cfg, evs: evs, at: i, to: w, tok: e.Token}
					break
				}
			}
			if behind != nil {
				break
			}
		}
	}
	if behind == nil || passed == nil {
		t.Fatalf("the fair sample has no hand with a waiter queued behind the head (%v) or no pass (%v)", behind != nil, passed != nil)
	}
	for _, tc := range []struct {
		name string
		h    *hand
		edit func([]model.Event, *hand) ([]model.Event, int) // the mutated trace and its mutated step (0-based)
		rule string
	}{
		{"a key handed to a waiter that is not the queue's head", behind, func(evs []model.Event, h *hand) ([]model.Event, int) {
			evs[h.at].Waiter, evs[h.at].Token = h.to, h.tok
			return evs, h.at
		}, "not the queue's head"},
		{"a lock passed in-process after it ended", passed, func(evs []model.Event, h *hand) ([]model.Event, int) {
			p := evs[h.passedAt]
			return slices.Insert(evs, h.passedAt, model.Event{Kind: model.Ended, At: p.At, Client: p.Client, Token: p.Token}), h.passedAt + 1
		}, "(pass) a lock that had ended passed on in-process"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mutated, step := tc.edit(slices.Clone(tc.h.evs), tc.h)
			err := model.Check(tc.h.cfg, mutated)
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
