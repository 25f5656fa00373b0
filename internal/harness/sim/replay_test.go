//go:build !race

package sim

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
)

// The race detector shuffles the order in which the goroutines of one
// virtual instant run, and some schedules still race there (see
// docs/simulation.md, "Determinism"): make test runs this test without it.

var replaysFlag = flag.Int("sim.replays", 0, "TestSimReplays: replays of each seed (0: its default)")

// procsFlag is TestSimReplays' GOMAXPROCS: two, as the long runs use
// (docs/simulation.md, "Determinism": seeds 1 to 60 gave one trace each in
// 10 replays on two Ps, with the machine's cores busy, 2026-12-06).
var procsFlag = flag.Int("sim.procs", 2, "TestSimReplays: GOMAXPROCS while replaying")

// TestSimReplays: a seed replays its trace. Every replay of a seed must
// give the same trace hash, whatever order the scheduler runs the
// goroutines of one virtual instant in.
func TestSimReplays(t *testing.T) {
	// Seeds 1 to 8 replayed 100 times each with one hash per seed, on one
	// P, with a core kept busy (2026-12-04).
	seeds, n := []uint64{1, 2, 3, 4, 5, 6, 7, 8}, 5
	if *seedFlag != 0 {
		seeds = []uint64{*seedFlag}
	} else if *nFlag > 0 {
		seeds = seeds[:0]
		for i := range *nFlag {
			seeds = append(seeds, uint64(1+i))
		}
	}
	if *replaysFlag > 0 {
		n = *replaysFlag
	}
	// Two Ps (-sim.procs). Before the breaker's shared probe and the
	// seeded waits, the goroutines of one virtual instant ran side by side
	// on two, and on a loaded machine one seed in three gave two traces in
	// 30 replays, so this test ran on one P; on today's code seeds 1 to 60
	// give one trace each on two (docs/simulation.md, "Determinism").
	procs := runtime.GOMAXPROCS(*procsFlag)
	t.Cleanup(func() { runtime.GOMAXPROCS(procs) })
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			hashes := make(map[uint64]int)
			var traces = make(map[uint64][]string)
			for range n {
				var res Result
				synctest.Test(t, func(t *testing.T) {
					s := Draw(seed, configFor(0, false)) // -sim.crowd: the seed's crowd schedule
					s.Wire = *wireFlag
					res = Run(s)
				})
				h := res.TraceHash()
				if dir := os.Getenv("SIM_DUMP"); dir != "" {
					_ = os.WriteFile(fmt.Sprintf("%s/trace-%d-%016x", dir, seed, h), []byte(strings.Join(res.Trace, "\n")), 0o644)
				}
				hashes[h]++
				traces[h] = res.Trace
			}
			if len(hashes) > 1 {
				var a, b []string
				for _, tr := range traces {
					if a == nil {
						a = tr
					} else if b == nil {
						b = tr
					}
				}
				at := 0
				for at < min(len(a), len(b)) && a[at] == b[at] {
					at++
				}
				t.Errorf("seed %d: %d replays gave %d trace hashes %v; two first differ at event %d, after\n  %s\none:\n  %s\nthe other:\n  %s", seed, n, len(hashes), hashes, at,
					strings.Join(a[max(0, at-*contextFlag):at], "\n  "),
					strings.Join(a[at:min(at+3, len(a))], "\n  "), strings.Join(b[at:min(at+3, len(b))], "\n  "))
			}
		})
	}
}
