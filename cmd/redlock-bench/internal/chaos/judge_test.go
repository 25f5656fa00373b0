package chaos

import (
	"context"
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
