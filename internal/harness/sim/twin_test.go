package sim

import (
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestTwinShowsStaleWrites: the unfenced twin store beside the guarded one
// accepts the stale writes the guard refuses, so the guard's invariant is
// shown able to fail. Of the default schedules with a client paused past
// its lease before it writes (seeds 1 to 24, played until one shows it),
// one must record a stale write on the twin, and none may record one
// admitted by the guard (9 of the 9 such schedules did, 2026-12-06).
func TestTwinShowsStaleWrites(t *testing.T) {
	withPause, stale := 0, 0
	for seed := uint64(1); seed <= 24; seed++ {
		s := Draw(seed, DefaultConfig)
		if !slices.ContainsFunc(s.Faults, func(f fault) bool { return f.kind == clientPause }) {
			continue
		}
		withPause++
		var res Result
		synctest.Test(t, func(t *testing.T) { res = Run(s) })
		for _, v := range res.Violations {
			if strings.Contains(v, "stale write") {
				t.Errorf("seed %d: %s", seed, v)
			}
		}
		if res.TwinStale > 0 {
			stale++
			break
		}
	}
	if withPause == 0 || stale == 0 {
		t.Fatalf("of %d schedules with a client pause, %d recorded a stale write on the twin: want some", withPause, stale)
	}
	t.Logf("%d of %d schedules with a client pause recorded a stale write on the unfenced twin; the guard admitted none", stale, withPause)
}

// TestCheckerSeesStaleWrite: the guard's invariants fail on a stale write
// admitted and on a current one refused, and the twin's count sees a stale
// write (a checker that cannot fail proves nothing).
func TestCheckerSeesStaleWrite(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	for _, tc := range []struct {
		name   string
		writes []write
		want   string
	}{
		{"stale admitted", []write{{key: "data:x", fence: 5, admitted: true, at: at(1)}, {key: "data:x", fence: 4, admitted: true, at: at(2)}}, "admitted a stale write"},
		{"current refused", []write{{key: "data:x", fence: 5, admitted: true, at: at(1)}, {key: "data:x", fence: 6, at: at(2)}}, "refused a current write"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &run{start: at(0), w: NewWorld(1)}
			r.res.Writes = tc.writes
			r.check()
			if got := strings.Join(r.res.Violations, "\n"); !strings.Contains(got, tc.want) {
				t.Errorf("violations %q, want one with %q", got, tc.want)
			}
		})
	}
	if n := staleOnTwin([]write{{key: "data:x", fence: 5}, {key: "data:y", fence: 1}, {key: "data:x", fence: 4}, {key: "data:x", fence: 6}}); n != 1 {
		t.Errorf("staleOnTwin = %d, want 1", n)
	}
}

// TestCheckerSeesLockPastLease: a lock handed out with its lease already
// over is a violation; one with lease left is not.
func TestCheckerSeesLockPastLease(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	for _, tc := range []struct {
		name       string
		got, until int
		want       bool
	}{
		{"past its lease", 500, 400, true},
		{"at its end", 400, 400, true},
		{"with lease left", 300, 400, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &run{start: at(0)}
			r.handedLive(holding{client: 1, worker: 0, resources: []string{"job:0"}, got: at(tc.got), until: at(tc.until)})
			if saw := strings.Contains(strings.Join(r.res.Violations, "\n"), "lease already over"); saw != tc.want {
				t.Errorf("violations %q; want one: %v", r.res.Violations, tc.want)
			}
		})
	}
}
