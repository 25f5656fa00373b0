package chaoscheck

import (
	"cmp"
	"slices"
	"sort"
	"time"
)

// Counts is what Check found in one run. A lock that kept its promise, or a fence that made up
// for it, leaves StaleWritesRejected == StaleWrites, FencedDuplicates and LostWrites 0, and
// Linearizable "ok"; the other counts say how often the lock alone failed.
type Counts struct {
	Acquisitions        int    `json:"acquisitions"`          // holdings
	LockOverlaps        int    `json:"lock_overlaps"`         // pairs of holdings of one resource whose [Acquired, End()) intervals meet
	FencesReused        int    `json:"fences_reused"`         // holdings whose non-zero fence an earlier holding of the resource got
	StaleWrites         int    `json:"stale_writes"`          // Writes called after an OK Claim or Write with a larger fence had returned
	StaleWritesRejected int    `json:"stale_writes_rejected"` // of those, the ones that did not land
	FencedDuplicates    int    `json:"fenced_duplicates"`     // records of Final.Fenced beyond the first of their job, per resource
	UnfencedDuplicates  int    `json:"unfenced_duplicates"`   // the same for Final.Shadow
	LostWrites          int    `json:"lost_writes"`           // OK Writes whose Entry is not in Final.Fenced
	Linearizable        string `json:"linearizable"`          // "ok", "illegal", or "unknown" (porcupine ran out of time)
}

// Check counts the failures recorded in h and checks its storage calls for linearizability
// against one fenced row per resource, giving porcupine at most timeout (<= 0: no bound).
// An op whose Return is 0 counts as Unknown whatever its Outcome says.
func Check(h History, timeout time.Duration) Counts {
	ops := make([]Op, len(h.Ops))
	for i, op := range h.Ops {
		if op.Return == 0 {
			op.Outcome = Unknown
		}
		ops[i] = op
	}
	c := Counts{
		Acquisitions:       len(h.Holdings),
		LockOverlaps:       lockOverlaps(h.Holdings),
		FencesReused:       fencesReused(h.Holdings),
		FencedDuplicates:   duplicates(h.Final.Fenced),
		UnfencedDuplicates: duplicates(h.Final.Shadow),
		LostWrites:         lostWrites(ops, h.Final.Fenced),
		Linearizable:       linearizable(ops, timeout),
	}
	c.StaleWrites, c.StaleWritesRejected = staleWrites(ops, h.Final.Fenced)
	return c
}

// lockOverlaps counts pairs of holdings of one resource that overlap. Intervals are half-open,
// [Acquired, End()): a holding that begins at the nanosecond the previous one ended is a
// hand-over, not an overlap, since the clock cannot order the two. A holding with Acquired 0
// did not happen and one that ends before it begins holds nothing; neither is counted.
func lockOverlaps(holdings []Holding) int {
	n := 0
	for _, hs := range byResource(holdings, func(h Holding) string { return h.Resource }) {
		hs = slices.DeleteFunc(hs, func(h Holding) bool { return h.Acquired == 0 || h.End() <= h.Acquired })
		slices.SortFunc(hs, func(a, b Holding) int { return cmp.Compare(a.Acquired, b.Acquired) })
		for i, a := range hs {
			// Sorted by Acquired, the holdings that meet a are the ones after it that begin
			// before it ends.
			for _, b := range hs[i+1:] {
				if b.Acquired >= a.End() {
					break
				}
				n++
			}
		}
	}
	return n
}

// fencesReused counts, per resource, the holdings beyond the first that got a fence. Fence 0
// is no fence (an unfenced run), so it is never reused.
func fencesReused(holdings []Holding) int {
	type key struct {
		resource string
		fence    uint64
	}
	seen := make(map[key]bool)
	n := 0
	for _, h := range holdings {
		if h.Fence == 0 {
			continue
		}
		k := key{h.Resource, h.Fence}
		if seen[k] {
			n++
		}
		seen[k] = true
	}
	return n
}

// staleWrites counts the Writes called after a Claim or Write with a larger fence had returned
// OK on the same resource (strictly after: equal timestamps leave the order unknown), and
// those of them that did not land: Rejected, or Unknown and absent from the final row.
func staleWrites(ops []Op, final map[string][]Entry) (stale, rejected int) {
	for resource, ops := range byResource(ops, func(op Op) string { return op.Resource }) {
		var done []Op
		for _, op := range ops {
			if op.Outcome == OK {
				done = append(done, op)
			}
		}
		slices.SortFunc(done, func(a, b Op) int { return cmp.Compare(a.Return, b.Return) })
		// largest[i] is the largest fence among done[:i+1].
		largest := make([]uint64, len(done))
		for i, op := range done {
			largest[i] = op.Fence
			if i > 0 {
				largest[i] = max(largest[i], largest[i-1])
			}
		}
		recorded := entrySet(final[resource])
		for _, w := range ops {
			if w.Kind != Write {
				continue
			}
			i := sort.Search(len(done), func(i int) bool { return done[i].Return >= w.Call })
			if i == 0 || largest[i-1] <= w.Fence {
				continue
			}
			stale++
			if w.Outcome == Rejected || (w.Outcome == Unknown && recorded[entryOf(w)] == 0) {
				rejected++
			}
		}
	}
	return stale, rejected
}

// duplicates counts the records beyond the first of each job number, per resource.
func duplicates(rows map[string][]Entry) int {
	n := 0
	for _, entries := range rows {
		seen := make(map[int64]bool, len(entries))
		for _, e := range entries {
			if seen[e.Job] {
				n++
			}
			seen[e.Job] = true
		}
	}
	return n
}

// lostWrites counts the OK Writes missing from the final rows. Two OK Writes of the same Entry
// need two records.
func lostWrites(ops []Op, final map[string][]Entry) int {
	left := make(map[string]map[Entry]int, len(final))
	for resource, entries := range final {
		left[resource] = entrySet(entries)
	}
	n := 0
	for _, w := range ops {
		if w.Kind != Write || w.Outcome != OK {
			continue
		}
		e := entryOf(w)
		if left[w.Resource][e] == 0 {
			n++
			continue
		}
		left[w.Resource][e]--
	}
	return n
}

func entryOf(w Op) Entry { return Entry{Job: w.Job, Fence: w.Fence, Worker: w.Worker} }

func entrySet(entries []Entry) map[Entry]int {
	m := make(map[Entry]int, len(entries))
	for _, e := range entries {
		m[e]++
	}
	return m
}

func byResource[T any](xs []T, resource func(T) string) map[string][]T {
	m := make(map[string][]T)
	for _, x := range xs {
		r := resource(x)
		m[r] = append(m[r], x)
	}
	return m
}
