package chaoscheck

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// checkTimeout bounds porcupine in every test; the histories here need microseconds.
const checkTimeout = time.Minute

func hold(worker int, resource string, fence uint64, acquired, until, released int64) Holding {
	return Holding{Worker: worker, Resource: resource, Fence: fence, Acquired: acquired, Until: until, Released: released}
}

func claim(worker int, resource string, fence uint64, job, callAt, returnAt int64, o Outcome) Op {
	return Op{Worker: worker, Resource: resource, Kind: Claim, Fence: fence, Job: job, Call: callAt, Return: returnAt, Outcome: o}
}

func write(worker int, resource string, fence uint64, job, callAt, returnAt int64, o Outcome) Op {
	return Op{Worker: worker, Resource: resource, Kind: Write, Fence: fence, Job: job, Call: callAt, Return: returnAt, Outcome: o}
}

func TestCheckCounts(t *testing.T) {
	// A fenced hand-over that went wrong: worker 1 claimed with fence 1 and paused; worker 2
	// claimed with fence 2 and wrote job 0; worker 1 woke and wrote job 0 with fence 1.
	late := func(o Outcome) []Op {
		return []Op{
			claim(1, "r", 1, 0, 10, 11, OK),
			claim(2, "r", 2, 0, 20, 21, OK),
			write(2, "r", 2, 0, 22, 23, OK),
			write(1, "r", 1, 0, 30, 31, o),
		}
	}
	both := map[string][]Entry{"r": {{Job: 0, Fence: 2, Worker: 2}, {Job: 0, Fence: 1, Worker: 1}}}
	secondOnly := map[string][]Entry{"r": {{Job: 0, Fence: 2, Worker: 2}}}

	tests := []struct {
		name string
		h    History
		want Counts
	}{{
		name: "overlapping holdings are one overlap",
		h:    History{Holdings: []Holding{hold(1, "r", 0, 10, 30, 30), hold(2, "r", 0, 20, 40, 40)}},
		want: Counts{Acquisitions: 2, LockOverlaps: 1, Linearizable: "ok"},
	}, {
		name: "three holdings of one moment are three pairs",
		h:    History{Holdings: []Holding{hold(1, "r", 0, 10, 30, 0), hold(2, "r", 0, 10, 30, 0), hold(3, "r", 0, 10, 30, 0)}},
		want: Counts{Acquisitions: 3, LockOverlaps: 3, Linearizable: "ok"},
	}, {
		name: "a hand-over at the same nanosecond is no overlap",
		h:    History{Holdings: []Holding{hold(1, "r", 0, 10, 30, 20), hold(2, "r", 0, 20, 40, 40)}},
		want: Counts{Acquisitions: 2, Linearizable: "ok"},
	}, {
		name: "a killed holder holds until its validity ends",
		h:    History{Holdings: []Holding{hold(1, "r", 0, 10, 100, 0), hold(2, "r", 0, 50, 150, 60)}},
		want: Counts{Acquisitions: 2, LockOverlaps: 1, Linearizable: "ok"},
	}, {
		name: "a release after the validity ended does not extend it",
		h:    History{Holdings: []Holding{hold(1, "r", 0, 10, 100, 500), hold(2, "r", 0, 100, 150, 120)}},
		want: Counts{Acquisitions: 2, Linearizable: "ok"},
	}, {
		name: "holdings of different resources never overlap",
		h:    History{Holdings: []Holding{hold(1, "a", 0, 10, 100, 0), hold(2, "b", 0, 10, 100, 0)}},
		want: Counts{Acquisitions: 2, Linearizable: "ok"},
	}, {
		name: "a fence handed out twice",
		h:    History{Holdings: []Holding{hold(1, "r", 5, 10, 20, 20), hold(2, "r", 5, 30, 40, 40), hold(3, "r", 6, 50, 60, 60)}},
		want: Counts{Acquisitions: 3, FencesReused: 1, Linearizable: "ok"},
	}, {
		name: "fence 0 is no fence, and one fence on two resources is no reuse",
		h:    History{Holdings: []Holding{hold(1, "r", 0, 10, 20, 20), hold(2, "r", 0, 30, 40, 40), hold(1, "a", 7, 10, 20, 20), hold(2, "b", 7, 10, 20, 20)}},
		want: Counts{Acquisitions: 4, Linearizable: "ok"},
	}, {
		name: "a stale write the store accepted",
		h:    History{Ops: late(OK), Final: Final{Fenced: both}},
		want: Counts{StaleWrites: 1, FencedDuplicates: 1, Linearizable: "illegal"},
	}, {
		name: "a stale write the store rejected",
		h:    History{Ops: late(Rejected), Final: Final{Fenced: secondOnly}},
		want: Counts{StaleWrites: 1, StaleWritesRejected: 1, Linearizable: "ok"},
	}, {
		name: "a stale write without an answer that did not land",
		h:    History{Ops: late(Unknown), Final: Final{Fenced: secondOnly}},
		want: Counts{StaleWrites: 1, StaleWritesRejected: 1, Linearizable: "ok"},
	}, {
		// No later call contradicts it landing or not, so only the final row shows that the
		// fence let it through.
		name: "a stale write without an answer that landed",
		h:    History{Ops: late(Unknown), Final: Final{Fenced: both}},
		want: Counts{StaleWrites: 1, FencedDuplicates: 1, Linearizable: "ok"},
	}, {
		name: "a write called before the larger claim returned is not stale",
		h: History{Ops: []Op{
			claim(1, "r", 1, 0, 10, 11, OK),
			claim(2, "r", 2, 1, 20, 30, OK),
			write(1, "r", 1, 0, 30, 31, OK),
		}, Final: Final{Fenced: map[string][]Entry{"r": {{Job: 0, Fence: 1, Worker: 1}}}}},
		want: Counts{Linearizable: "ok"},
	}, {
		name: "duplicates in the shadow, none in the fenced rows",
		h: History{Final: Final{
			Fenced: map[string][]Entry{"r": {{Job: 0, Fence: 2, Worker: 2}, {Job: 1, Fence: 3, Worker: 1}}},
			Shadow: map[string][]Entry{"r": {{Job: 0, Worker: 2}, {Job: 0, Worker: 1}, {Job: 1, Worker: 1}, {Job: 1, Worker: 2}}, "s": {{Job: 0}, {Job: 0}}},
		}},
		want: Counts{UnfencedDuplicates: 3, Linearizable: "ok"},
	}, {
		name: "an acknowledged write missing from the row is lost; a rejected one is not",
		h: History{Ops: []Op{
			claim(1, "r", 1, 0, 10, 11, OK),
			write(1, "r", 1, 0, 12, 13, OK),
			claim(2, "r", 2, 1, 20, 21, OK),
			write(2, "r", 2, 1, 22, 23, OK),
			write(3, "r", 0, 1, 24, 25, Rejected),
		}, Final: Final{Fenced: map[string][]Entry{"r": {{Job: 0, Fence: 1, Worker: 1}}}}},
		want: Counts{LostWrites: 1, StaleWrites: 1, StaleWritesRejected: 1, Linearizable: "ok"},
	}, {
		name: "two acknowledged writes of one entry need two records",
		h: History{Ops: []Op{
			claim(1, "r", 1, 0, 10, 11, OK),
			write(1, "r", 1, 0, 12, 13, OK),
			write(1, "r", 1, 0, 14, 15, OK),
		}, Final: Final{Fenced: map[string][]Entry{"r": {{Job: 0, Fence: 1, Worker: 1}}}}},
		want: Counts{LostWrites: 1, Linearizable: "ok"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, Check(tt.h, checkTimeout))
		})
	}
}

// TestCheckSyntheticRun checks the counts of a whole run whose failures are known: every
// paused round leaves one overlap, one stale write the fence refused and one shadow duplicate.
func TestCheckSyntheticRun(t *testing.T) {
	h, paused := synthetic(4, 500)
	c := Check(h, checkTimeout)
	assert.Equal(t, Counts{
		Acquisitions:        len(h.Holdings),
		LockOverlaps:        paused,
		StaleWrites:         paused,
		StaleWritesRejected: paused,
		UnfencedDuplicates:  paused,
		Linearizable:        "ok",
	}, c)
	assert.Positive(t, paused)
}

// synthetic is a fenced run over resources rows with rounds rounds each, all rows on one
// timeline (ns from 1,000). Most rounds are a claim and a write; every 25th a holder pauses
// past its validity, the next holder takes over early (a fast clock) and the woken holder's
// late write, concurrent with its successor's, is refused; every 40th write gets no answer
// and lands. It returns the history and the number of paused rounds.
func synthetic(resources, rounds int) (History, int) {
	h := History{Final: Final{Fenced: map[string][]Entry{}, Shadow: map[string][]Entry{}}}
	paused := 0
	for r := range resources {
		res := string(rune('a' + r))
		t, job, fence := int64(1000), int64(0), uint64(0)
		land := func(w int, f uint64, j int64) {
			h.Final.Fenced[res] = append(h.Final.Fenced[res], Entry{Job: j, Fence: f, Worker: w})
		}
		shadow := func(w int, j int64) {
			h.Final.Shadow[res] = append(h.Final.Shadow[res], Entry{Job: j, Worker: w})
		}
		for i := range rounds {
			w := (i + r) % 8
			fence++
			switch {
			case i%25 == 24:
				paused++
				next := (w + 1) % 8
				h.Holdings = append(h.Holdings, hold(w, res, fence, t, t+100, 0), hold(next, res, fence+1, t+90, t+190, t+150))
				h.Ops = append(h.Ops,
					claim(w, res, fence, job, t+1, t+5, OK),
					claim(next, res, fence+1, job, t+91, t+95, OK),
					write(w, res, fence, job, t+110, t+120, Rejected),
					write(next, res, fence+1, job, t+111, t+118, OK))
				land(next, fence+1, job)
				shadow(w, job)
				shadow(next, job)
				fence++
				t += 200
			default:
				outcome, ret := OK, t+8
				if i%40 == 39 {
					outcome, ret = Unknown, 0
				}
				h.Holdings = append(h.Holdings, hold(w, res, fence, t, t+100, t+10))
				h.Ops = append(h.Ops, claim(w, res, fence, job, t+1, t+5, OK), write(w, res, fence, job, t+6, ret, outcome))
				land(w, fence, job)
				shadow(w, job)
				t += 100
			}
			job++
		}
	}
	return h, paused
}

var countsSink Counts

// BenchmarkCheck is Check on a run of about 5,000 storage calls over 4 resources.
func BenchmarkCheck(b *testing.B) {
	h, _ := synthetic(4, 600)
	b.ReportMetric(float64(len(h.Ops)), "ops/history")
	b.ReportAllocs()
	for b.Loop() {
		countsSink = Check(h, time.Minute)
	}
	if countsSink.Linearizable != "ok" {
		b.Fatalf("linearizable %q, want ok", countsSink.Linearizable)
	}
}
