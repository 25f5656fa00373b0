package sim

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestCheckerSeesStalledCrowd: invariant B fails on a crowd's resource
// left free past handoverBound while a Lock waited, and not when the gap
// is short, when a fault (or a latency spike, or its settling) covers it,
// nor for a plain client's wait in a mixed deployment while a fair Lock is
// about (within an entry TTL); it does fail for that wait when none is.
func TestCheckerSeesStalledCrowd(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	held := []holding{
		{client: 0, resources: []string{"crowd:0"}, fences: []uint64{1}, fenced: true, got: at(0), until: at(1000), end: at(10), released: at(11)},
		{client: 1, resources: []string{"crowd:0"}, fences: []uint64{2}, fenced: true, got: at(400), until: at(1400), end: at(410), released: at(411)},
	}
	wait := waited{client: 1, resource: "crowd:0", began: at(5), ended: at(400), won: true}
	for _, tc := range []struct {
		name   string
		got    int // when the second holder got it
		faults []fault
		fair   []bool
		fairOn bool // a fair Lock of client 0 waited from 5 to 8 ms (gave up)
		want   bool
	}{
		{"stalled", 400, nil, []bool{true, true}, false, true},
		{"handed over in time", 11 + int(handoverBound/time.Millisecond), nil, []bool{true, true}, false, false},
		{"a spike, then its settling", 400, []fault{{kind: spike, at: 50 * time.Millisecond, lasts: 100 * time.Millisecond, client: 0}}, []bool{true, true}, false, false},
		{"a spike long before", 400, []fault{{kind: spike, at: 0, lasts: 1, client: 0}}, []bool{true, true}, false, true},
		{"a master's fault a TTL before", 400, []fault{{kind: down, at: 0, lasts: 1}}, []bool{true, true}, false, false},
		{"a plain client in a mixed deployment, a fair waiter about", 400, nil, []bool{true, false}, true, false},
		{"a plain client in a mixed deployment, no fair waiter", 400, nil, []bool{true, false}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &run{start: at(0), w: NewWorld(1)}
			r.s.Config.TTL = time.Second
			r.s.Bursts = []burst{{resource: "crowd:0"}}
			r.s.Faults, r.s.Fair = tc.faults, tc.fair
			r.res.Holdings = slices.Clone(held)
			r.res.Holdings[1].got = at(tc.got)
			r.res.Waits = []waited{wait}
			r.res.Waits[0].ended = at(tc.got)
			if tc.fairOn {
				r.res.Waits = append(r.res.Waits, waited{client: 0, resource: "crowd:0", began: at(5), ended: at(8)})
			}
			r.check()
			got := strings.Join(r.res.Violations, "\n")
			if saw := strings.Contains(got, "none won it"); saw != tc.want {
				t.Errorf("violations %q; want one of invariant B: %v", got, tc.want)
			}
		})
	}
}

// TestCheckerSeesSplitTryBurst: a TryLock burst with no winner, or two,
// is a violation when the world was settled throughout it, and one winner
// is not; nor is a burst a spike or its settling overlaps.
func TestCheckerSeesSplitTryBurst(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	for _, tc := range []struct {
		name   string
		won    int
		faults []fault
		want   bool
	}{
		{"split", 0, nil, true},
		{"one", 1, nil, false},
		{"two", 2, nil, true},
		{"in a spike", 0, []fault{{kind: spike, at: 500 * time.Millisecond, lasts: 50 * time.Millisecond}}, false},
		{"as a spike settles", 0, []fault{{kind: spike, at: 400 * time.Millisecond, lasts: 50 * time.Millisecond}}, false},
		{"after it settled", 0, []fault{{kind: spike, at: 100 * time.Millisecond, lasts: 50 * time.Millisecond}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &run{start: at(0), w: NewWorld(1)}
			r.s.Config.TTL = time.Second
			r.s.Bursts = []burst{{resource: "crowd:0"}}
			r.s.Faults = tc.faults
			r.res.TryBursts = []tryBurstResult{{resource: "crowd:0", calls: 40, from: at(500), to: at(502), won: tc.won}}
			r.check()
			got := strings.Join(r.res.Violations, "\n")
			if saw := strings.Contains(got, "TryLock burst"); saw != tc.want {
				t.Errorf("violations %q; want one on the TryLock burst: %v", got, tc.want)
			}
		})
	}
}

// TestCleanBy: invariant A's deadline is undoBound after the call returned,
// or releaseRetryBound after a latency spike of its client in effect in
// the call or up to that deadline, whichever is later.
func TestCleanBy(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	ms := func(t time.Time) time.Duration { return t.Sub(at(0)) }
	for _, tc := range []struct {
		name   string
		faults []fault
		by     time.Duration
		spiked time.Duration
	}{
		{"no spike", nil, 300*time.Millisecond + undoBound, 0},
		{"a spike in the call", []fault{{kind: spike, at: 250 * time.Millisecond, lasts: 200 * time.Millisecond, client: 0}},
			450*time.Millisecond + releaseRetryBound, 450 * time.Millisecond},
		{"every client's spike", []fault{{kind: spike, at: 250 * time.Millisecond, lasts: 200 * time.Millisecond, client: allClients}},
			450*time.Millisecond + releaseRetryBound, 450 * time.Millisecond},
		{"another client's spike", []fault{{kind: spike, at: 250 * time.Millisecond, lasts: 200 * time.Millisecond, client: 1}},
			300*time.Millisecond + undoBound, 0},
		{"a spike before the call", []fault{{kind: spike, at: 0, lasts: 100 * time.Millisecond, client: 0}},
			300*time.Millisecond + undoBound, 0},
		{"a spike that begins as the undo lands", []fault{{kind: spike, at: 350 * time.Millisecond, lasts: 100 * time.Millisecond, client: 0}},
			450*time.Millisecond + releaseRetryBound, 450 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &run{start: at(0)}
			r.s.Faults = tc.faults
			by, spiked := r.cleanBy(0, at(200), at(300))
			var sp time.Duration
			if !spiked.IsZero() {
				sp = ms(spiked)
			}
			if ms(by) != tc.by || sp != tc.spiked {
				t.Errorf("cleanBy = %v, spiked %v; want %v, %v", ms(by), sp, tc.by, tc.spiked)
			}
		})
	}
}
