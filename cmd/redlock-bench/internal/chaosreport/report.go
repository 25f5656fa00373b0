// Package chaosreport is a row of the chaos table: what the runs of one scenario came to
// ([Row]), summed from each run's record ([Run]) and held against the invariants every scenario
// keeps (no fenced duplicate, no lost write, no fence twice, every stale write refused, a
// linearizable store, every grant on a majority, the fault verified). A scenario's own bounds,
// and what it must provoke, are package chaos's.
package chaosreport

import (
	"math"
	"slices"
	"time"

	"quorumlock.dev/cmd/redlock-bench/internal/chaoscheck"
	"quorumlock.dev/cmd/redlock-bench/internal/chaosworker"
)

// Row is what the runs of one scenario came to. Counts are summed over the runs; latency
// percentiles are over the attempts of all the runs together; recovery, peaks and the ghost TTL
// are the worst run's.
type Row struct {
	Scenario            string  `json:"scenario"`
	Variant             string  `json:"variant"`       // how the fault was made, where there is a choice
	RestartGuard        bool    `json:"restart_guard"` // the workers' clients ran redlock.WithRestartGuard
	Store               string  `json:"store"`         // memory, postgres, mysql or sqlite
	Runs                int     `json:"runs"`
	Acquisitions        int     `json:"acquisitions"`
	LockOverlaps        int     `json:"lock_overlaps"`
	StaleWrites         int     `json:"stale_writes"`
	StaleWritesRejected int     `json:"stale_writes_rejected"`
	FencedDuplicates    int     `json:"fenced_duplicates"`
	UnfencedDuplicates  int     `json:"unfenced_duplicates"` // the same jobs written with the lock alone
	LostWrites          int     `json:"lost_writes"`
	FencesReused        int     `json:"fences_reused"`
	WithoutMajority     int     `json:"grants_without_majority"`
	Unavailable         int     `json:"unavailable"`
	UnavailableP99Ms    float64 `json:"unavailable_p99_ms"` // how long an attempt took to say so
	FenceUnavailable    int     `json:"fence_unavailable"`
	Errors              int     `json:"errors"`         // attempts that failed otherwise
	AcquireP50Ms        float64 `json:"acquire_p50_ms"` // won attempts while the fault lasted
	AcquireP99Ms        float64 `json:"acquire_p99_ms"`
	HealthyP50Ms        float64 `json:"healthy_p50_ms"` // won attempts before the fault
	RecoveryMs          float64 `json:"recovery_ms"`    // fault's end to the next won lock (-1: none)
	PeakGoroutines      int     `json:"peak_goroutines"`
	PeakHeapMB          float64 `json:"peak_heap_mb"`
	GhostKeys           int     `json:"ghost_keys"` // paused-master-ghost: keys the master applied for nobody
	GhostTTLMs          float64 `json:"ghost_ttl_ms"`
	ClockJumpsDetected  int     `json:"clock_jumps_detected"` // master-clock-jump: jumps a client's clock monitor reported
	Failovers           int     `json:"failovers"`            // leader scenarios: leaders lost (killed, cut off, resigned) and replaced
	FailoverP50Ms       float64 `json:"failover_p50_ms"`      // from the loss to the next leader's Campaign returning, over every run's failovers
	FailoverP99Ms       float64 `json:"failover_p99_ms"`
	FailoverMaxMs       float64 `json:"failover_max_ms"`
	Linearizable        string  `json:"linearizable"` // the fenced store's history: ok, illegal or unknown
	FaultInjected       bool    `json:"fault_injected"`
	Observed            bool    `json:"observed"` // an overlap or a stale write was seen, where the lock alone cannot hold
	Held                bool    `json:"held"`     // every invariant and bound of the scenario held
	Problems            string  `json:"problems"` // what did not hold
	Skipped             string  `json:"skipped"`  // why the scenario could not run here ("": it ran)
}

// Fault is what a scenario's injection did.
type Fault struct {
	Injected   bool      // verified: the process was stopped, the port closed, the key gone
	Start, End time.Time // when the fault began and ended (End = Start for a kill)
	Resource   string    // the resource it aimed at, if one: recovery counts only its locks
	Ghosts     int
	GhostTTL   time.Duration
	ClockJumps int             // jumps the coordinator's clock monitor reported
	Failovers  []time.Duration // leader scenarios: from each loss of the leader to the next leader
	Variant    string          // overrides the scenario's
}

// Run is one run's record: its fault, the checks over its history, and what the workers
// reported.
type Run struct {
	Fault    Fault
	Counts   chaoscheck.Counts
	Holdings []chaoscheck.Holding
	chaosworker.Summary
}

// Sum sums runs into r, whose Scenario, Variant, RestartGuard and Store the caller has set,
// and calls fail for each invariant that did not hold; masters is the number of lock masters.
// It leaves Held and Problems to the caller, who may find more.
func Sum(r *Row, masters int, runs []Run, fail func(format string, args ...any)) {
	r.Runs, r.FaultInjected, r.Linearizable, r.RecoveryMs = len(runs), true, "ok", 0
	var during, before, unavailable, failovers []time.Duration
	for _, res := range runs {
		c := res.Counts
		r.Acquisitions += c.Acquisitions
		r.LockOverlaps += c.LockOverlaps
		r.StaleWrites += c.StaleWrites
		r.StaleWritesRejected += c.StaleWritesRejected
		r.FencedDuplicates += c.FencedDuplicates
		r.UnfencedDuplicates += c.UnfencedDuplicates
		r.LostWrites += c.LostWrites
		r.FencesReused += c.FencesReused
		if c.Linearizable != "ok" && r.Linearizable != "illegal" {
			r.Linearizable = c.Linearizable
		}
		r.FaultInjected = r.FaultInjected && res.Fault.Injected
		if res.Fault.Variant != "" {
			r.Variant = res.Fault.Variant
		}
		for _, m := range res.Majority {
			if m >= 0 && m < masters/2+1 {
				r.WithoutMajority++
			}
		}
		start, end := res.Fault.Start.UnixNano(), res.Fault.End.UnixNano()
		for _, a := range res.Attempts {
			switch a.Result {
			case "acquired":
				if a.At < start {
					before = append(before, a.Latency)
				} else if a.At <= max(end, start+int64(time.Second)) {
					during = append(during, a.Latency)
				}
			case "unavailable":
				r.Unavailable++
				unavailable = append(unavailable, a.Latency)
			case "fence_unavailable":
				r.FenceUnavailable++
			case "error":
				r.Errors++
			}
		}
		rec := res.recovery()
		if rec < 0 || r.RecoveryMs < 0 {
			r.RecoveryMs = -1
		} else {
			r.RecoveryMs = max(r.RecoveryMs, Ms(rec))
		}
		r.PeakGoroutines = max(r.PeakGoroutines, res.PeakGoroutines)
		r.PeakHeapMB = max(r.PeakHeapMB, float64(res.PeakHeap)/(1<<20))
		r.GhostKeys += res.Fault.Ghosts
		r.GhostTTLMs = max(r.GhostTTLMs, Ms(res.Fault.GhostTTL))
		r.ClockJumpsDetected += res.Fault.ClockJumps
		failovers = append(failovers, res.Fault.Failovers...)
		if len(res.Bad) > 0 {
			r.Errors += len(res.Bad)
		}
	}
	r.AcquireP50Ms, r.AcquireP99Ms = Ms(percentile(during, 0.50)), Ms(percentile(during, 0.99))
	r.HealthyP50Ms = Ms(percentile(before, 0.50))
	r.UnavailableP99Ms = Ms(percentile(unavailable, 0.99))
	r.Failovers = len(failovers)
	r.FailoverP50Ms, r.FailoverP99Ms = Ms(percentile(failovers, 0.50)), Ms(percentile(failovers, 0.99))
	r.FailoverMaxMs = Ms(percentile(failovers, 1))
	r.Observed = r.LockOverlaps > 0 || r.StaleWrites > 0

	if !r.FaultInjected {
		fail("the fault was not verified in every run")
	}
	if r.FencedDuplicates != 0 {
		fail("%d fenced duplicates", r.FencedDuplicates)
	}
	if r.LostWrites != 0 {
		fail("%d lost writes", r.LostWrites)
	}
	if r.FencesReused != 0 {
		fail("%d fences handed out twice", r.FencesReused)
	}
	if r.StaleWritesRejected != r.StaleWrites {
		fail("%d of %d stale writes accepted", r.StaleWrites-r.StaleWritesRejected, r.StaleWrites)
	}
	if r.Linearizable != "ok" {
		fail("store history %s", r.Linearizable)
	}
	if r.WithoutMajority != 0 {
		fail("%d locks granted without a majority holding the token", r.WithoutMajority)
	}
}

// recovery is the time from the fault's end to the first lock won after it (on the fault's
// resource, if it had one), or -1.
func (r Run) recovery() time.Duration {
	if r.Fault.End.IsZero() {
		return -1
	}
	end := r.Fault.End.UnixNano()
	best := int64(math.MaxInt64)
	for _, h := range r.Holdings {
		if h.Acquired >= end && (r.Fault.Resource == "" || h.Resource == r.Fault.Resource) {
			best = min(best, h.Acquired)
		}
	}
	if best == math.MaxInt64 {
		return -1
	}
	return time.Duration(best - end)
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(i, 0)]
}

// Ms is d in milliseconds, to two decimals, as the rows give durations.
func Ms(d time.Duration) float64 { return math.Round(float64(d)/1e4) / 100 }
