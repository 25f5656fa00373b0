package chaos

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/cmd/redlock-bench/internal/chaoscheck"
	"quorumlock.dev/cmd/redlock-bench/internal/chaosreport"
	"quorumlock.dev/cmd/redlock-bench/internal/chaosworker"
)

// clean is one run in which everything held.
func clean() chaosreport.Run {
	t0 := time.Unix(1000, 0)
	return chaosreport.Run{
		Fault:    chaosreport.Fault{Injected: true, Start: t0, End: t0.Add(time.Second)},
		Counts:   chaoscheck.Counts{Acquisitions: 10, Linearizable: "ok"},
		Holdings: []chaoscheck.Holding{{Resource: "chaos:R0", Acquired: t0.Add(1100 * time.Millisecond).UnixNano()}},
	}
}

// TestRowJudges: each invariant, broken in one run, makes the row fail and names itself; a
// clean run holds.
func TestRowJudges(t *testing.T) {
	cfg := Config{Quick: true}
	require.NoError(t, cfg.defaults())
	plain := &scenario{name: "plain"}
	r := plain.row(cfg, []chaosreport.Run{clean()})
	require.True(t, r.Held, r.Problems)
	assert.Equal(t, 100.0, r.RecoveryMs)

	for _, tc := range []struct {
		name   string
		sc     *scenario
		break_ func(*chaosreport.Run)
		want   string
	}{
		{"fenced duplicate", plain, func(r *chaosreport.Run) { r.Counts.FencedDuplicates = 1 }, "1 fenced duplicates"},
		{"lost write", plain, func(r *chaosreport.Run) { r.Counts.LostWrites = 2 }, "2 lost writes"},
		{"fence twice", plain, func(r *chaosreport.Run) { r.Counts.FencesReused = 1 }, "fences handed out twice"},
		{"stale write accepted", plain, func(r *chaosreport.Run) { r.Counts.StaleWrites = 3; r.Counts.StaleWritesRejected = 2 }, "1 of 3 stale writes accepted"},
		{"not linearizable", plain, func(r *chaosreport.Run) { r.Counts.Linearizable = "illegal" }, "store history illegal"},
		{"fault not verified", plain, func(r *chaosreport.Run) { r.Fault.Injected = false }, "not verified"},
		{"grant without majority", plain, func(r *chaosreport.Run) { r.Majority = []int{5, 2} }, "without a majority"},
		{"nothing provoked", &scenario{name: "p", mustObserve: true}, func(r *chaosreport.Run) { r.Counts.UnfencedDuplicates = 1 }, "did not provoke"},
		{"unfenced twin silent", &scenario{name: "p", mustObserve: true}, func(r *chaosreport.Run) { r.Counts.LockOverlaps = 1 }, "unfenced twin"},
		{"no recovery", &scenario{name: "k", judge: judgeMinorityDown}, func(r *chaosreport.Run) { r.Holdings = nil }, "no lock within"},
		{"holder-kill too slow", &scenario{name: "k", judge: judgeHolderKill}, func(r *chaosreport.Run) {
			r.Holdings[0].Acquired = r.Fault.End.Add(3 * time.Second).UnixNano()
		}, "bound"},
		{"clock jump not caught", &scenario{name: "c", judge: judgeClockJump}, func(r *chaosreport.Run) { r.Fault.ClockJumps = 2 }, "caught 2 of 6 clock jumps"},
		{"leader-kill without a new leader", leaderKill, func(r *chaosreport.Run) {}, "0 of 2 losses of the leader"},
		{"leader-kill too slow", leaderKill, func(r *chaosreport.Run) {
			r.Fault.Failovers = []time.Duration{3 * time.Second}
		}, "failover p99 3000.00 ms"},
		{"leader-kill two leaders", leaderKill, func(r *chaosreport.Run) {
			r.Fault.Failovers = []time.Duration{time.Second}
			h := r.Holdings[0]
			h.Released, h.Until = h.Acquired+int64(time.Second), math.MaxInt64
			r.Holdings = []chaoscheck.Holding{h, {Worker: 1, Resource: h.Resource, Acquired: h.Acquired + int64(400*time.Millisecond), Until: math.MaxInt64}}
		}, "1 pairs of terms alive at once"},
		{"leader-pause nothing stale", leaderPause, func(r *chaosreport.Run) {
			r.Fault.Failovers = []time.Duration{time.Second}
		}, "attempted no stale delivery"},
		{"leader-partition term alive", leaderPartition, func(r *chaosreport.Run) {
			r.Fault.Failovers = []time.Duration{time.Second}
		}, "did not end with its lock lost"},
		{"leader-resign slow", leaderResign, func(r *chaosreport.Run) {
			r.Fault.Failovers = make([]time.Duration, 20)
			for i := range r.Fault.Failovers {
				r.Fault.Failovers[i] = time.Second
			}
		}, "failover p99 1000.00 ms"},
		{"majority-down silent", &scenario{name: "m", judge: judgeMajorityDown}, func(r *chaosreport.Run) {}, "no attempt reported the quorum unavailable"},
		{"majority-down slow", &scenario{name: "m", judge: judgeMajorityDown}, func(r *chaosreport.Run) {
			r.Attempts = []chaosworker.Attempt{{Result: "unavailable", Latency: 2 * time.Second}}
		}, "quorum unavailable after"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := clean()
			tc.break_(&res)
			r := tc.sc.row(cfg, []chaosreport.Run{clean(), res})
			assert.False(t, r.Held)
			assert.Contains(t, r.Problems, tc.want)
		})
	}
}

// TestLeaderJudgesHold: runs that did what each leader scenario is for pass its judge.
func TestLeaderJudgesHold(t *testing.T) {
	cfg := Config{Quick: true}
	require.NoError(t, cfg.defaults())
	run := func(fix func(*chaosreport.Run)) chaosreport.Run {
		r := clean()
		r.Fault.Failovers = []time.Duration{cfg.TTL}
		fix(&r)
		return r
	}
	for _, tc := range []struct {
		sc  *scenario
		fix func(*chaosreport.Run)
	}{
		{leaderKill, func(*chaosreport.Run) {}},
		{leaderPause, func(r *chaosreport.Run) {
			r.Counts.StaleWrites, r.Counts.StaleWritesRejected = 1, 1
			r.Counts.LockOverlaps, r.Counts.UnfencedDuplicates = 1, 1
		}},
		{leaderPartition, func(r *chaosreport.Run) {
			r.TermEnds = []chaosworker.TermEnd{{At: r.Fault.Start.Add(time.Millisecond).UnixNano(), Cause: "redlock: lock lost: renewal: x"}}
		}},
		{leaderResign, func(r *chaosreport.Run) {
			r.Fault.Failovers = make([]time.Duration, handovers(cfg))
			for i := range r.Fault.Failovers {
				r.Fault.Failovers[i] = 5 * time.Millisecond
			}
		}},
	} {
		t.Run(tc.sc.name, func(t *testing.T) {
			r := tc.sc.row(cfg, []chaosreport.Run{run(tc.fix), run(tc.fix)})
			assert.True(t, r.Held, r.Problems)
			assert.Positive(t, r.Failovers)
		})
	}
}

// TestResignations: each resignation is timed to the next term won after it, whoever won it;
// other ends of terms, and a resignation no term followed yet, are not timed.
func TestResignations(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) int64 { return t0.Add(time.Duration(ms) * time.Millisecond).UnixNano() }
	ends := []chaosworker.TermEnd{
		{Worker: 0, At: at(-5), Cause: chaosworker.Resigned}, // before the fault: not timed
		{Worker: 0, At: at(10), Cause: chaosworker.Resigned},
		{Worker: 1, At: at(20), Cause: chaosworker.Stopped},
		{Worker: 2, At: at(30), Cause: chaosworker.Resigned},
		{Worker: 1, At: at(50), Cause: chaosworker.Resigned}, // nobody after it yet
	}
	terms := []chaoscheck.Holding{{Worker: 2, Acquired: at(25)}, {Worker: 1, Acquired: at(13)}, {Worker: 0, Acquired: at(33)}}
	assert.Equal(t, []time.Duration{3 * time.Millisecond, 3 * time.Millisecond}, resignations(ends, terms, t0))
}

// TestTermsAliveAtOnce: terms that meet count only by more than the room.
func TestTermsAliveAtOnce(t *testing.T) {
	ms := func(n int) int64 { return int64(n) * int64(time.Millisecond) }
	open := int64(math.MaxInt64)
	terms := []chaoscheck.Holding{
		{Worker: 0, Acquired: ms(0), Until: open, Released: ms(100)},
		{Worker: 1, Acquired: ms(105), Until: open, Released: ms(300)}, // after the first
		{Worker: 2, Acquired: ms(290), Until: open, Released: ms(400)}, // 10 ms before the second ended
	}
	assert.Zero(t, termsAliveAtOnce(terms, 20*time.Millisecond))
	assert.Equal(t, 1, termsAliveAtOnce(terms, 5*time.Millisecond))
	terms = append(terms, chaoscheck.Holding{Worker: 0, Acquired: ms(50), Until: open}) // never ended
	assert.Equal(t, 3, termsAliveAtOnce(terms, 20*time.Millisecond))
}

func TestConfigRefused(t *testing.T) {
	for _, cfg := range []Config{
		{Masters: 3},
		{Workers: 1},
		{Runs: -1},
		{TTL: 100 * time.Millisecond},
		{Scenarios: []string{"no-such"}},
	} {
		_, err := Run(context.Background(), cfg)
		assert.ErrorIs(t, err, ErrConfig, "%+v", cfg)
	}
}

// TestNoErrorsSpare: with one master faulty, a loaded machine may cost a few
// attempts their quorum, one per 25 locks won; one more fails the row.
func TestNoErrorsSpare(t *testing.T) {
	cfg := Config{Quick: true}
	require.NoError(t, cfg.defaults())
	row := func(unavailable int) Row {
		r := clean()
		r.Counts.Acquisitions = 100
		for range unavailable {
			r.Attempts = append(r.Attempts, chaosworker.Attempt{Result: "unavailable", Latency: 50 * time.Millisecond})
		}
		return slowMaster.row(cfg, []chaosreport.Run{r})
	}
	ok := row(4)
	assert.True(t, ok.Held, ok.Problems)
	bad := row(5)
	assert.False(t, bad.Held)
	assert.Contains(t, bad.Problems, "5 attempts found no quorum")
}

// TestQuickRunsAgainUntilProvoked: the quick size runs a mustObserve scenario up to two more
// times while its runs have not shown both an overlap (or a stale write) and an unfenced
// duplicate; other scenarios and full-size runs get no extra run.
func TestQuickRunsAgainUntilProvoked(t *testing.T) {
	quick, full := Config{Quick: true}, Config{}
	require.NoError(t, quick.defaults())
	require.NoError(t, full.defaults())
	must := &scenario{name: "p", mustObserve: true}
	assert.Equal(t, quickAgain, must.extraRuns(quick))
	assert.Zero(t, must.extraRuns(full))
	assert.Zero(t, (&scenario{name: "plain"}).extraRuns(quick))

	overlap, dup := clean(), clean()
	overlap.Counts.LockOverlaps = 1
	dup.Counts.UnfencedDuplicates = 1
	both := clean()
	both.Counts.StaleWrites, both.Counts.UnfencedDuplicates = 1, 1
	assert.False(t, provoked(nil))
	assert.False(t, provoked([]chaosreport.Run{clean(), overlap}), "an overlap without a duplicate in the twin")
	assert.False(t, provoked([]chaosreport.Run{dup}), "a duplicate without an overlap")
	assert.True(t, provoked([]chaosreport.Run{overlap, dup}), "seen over two runs")
	assert.True(t, provoked([]chaosreport.Run{clean(), both}))
}
