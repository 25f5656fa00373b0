package chaos

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/cmd/redlock-bench/internal/chaoscheck"
	"quorumlock.dev/redlock"
)

// clean is one run in which everything held.
func clean() result {
	t0 := time.Unix(1000, 0)
	return result{
		fault:    fault{injected: true, start: t0, end: t0.Add(time.Second)},
		counts:   chaoscheck.Counts{Acquisitions: 10, Linearizable: "ok"},
		holdings: []chaoscheck.Holding{{Resource: "chaos:R0", Acquired: t0.Add(1100 * time.Millisecond).UnixNano()}},
	}
}

// TestRowJudges: each invariant, broken in one run, makes the row fail and names itself; a
// clean run holds.
func TestRowJudges(t *testing.T) {
	cfg := Config{Quick: true}
	require.NoError(t, cfg.defaults())
	plain := &scenario{name: "plain"}
	r := plain.row(cfg, []result{clean()})
	require.True(t, r.Held, r.Problems)
	assert.Equal(t, 100.0, r.RecoveryMs)

	for _, tc := range []struct {
		name   string
		sc     *scenario
		break_ func(*result)
		want   string
	}{
		{"fenced duplicate", plain, func(r *result) { r.counts.FencedDuplicates = 1 }, "1 fenced duplicates"},
		{"lost write", plain, func(r *result) { r.counts.LostWrites = 2 }, "2 lost writes"},
		{"fence twice", plain, func(r *result) { r.counts.FencesReused = 1 }, "fences handed out twice"},
		{"stale write accepted", plain, func(r *result) { r.counts.StaleWrites = 3; r.counts.StaleWritesRejected = 2 }, "1 of 3 stale writes accepted"},
		{"not linearizable", plain, func(r *result) { r.counts.Linearizable = "illegal" }, "store history illegal"},
		{"fault not verified", plain, func(r *result) { r.fault.injected = false }, "not verified"},
		{"grant without majority", plain, func(r *result) { r.majority = []int{5, 2} }, "without a majority"},
		{"nothing provoked", &scenario{name: "p", mustObserve: true}, func(r *result) { r.counts.UnfencedDuplicates = 1 }, "did not provoke"},
		{"unfenced twin silent", &scenario{name: "p", mustObserve: true}, func(r *result) { r.counts.LockOverlaps = 1 }, "unfenced twin"},
		{"no recovery", &scenario{name: "k", judge: judgeMinorityDown}, func(r *result) { r.holdings = nil }, "no lock within"},
		{"holder-kill too slow", &scenario{name: "k", judge: judgeHolderKill}, func(r *result) {
			r.holdings[0].Acquired = r.fault.end.Add(3 * time.Second).UnixNano()
		}, "bound"},
		{"clock jump not caught", &scenario{name: "c", judge: judgeClockJump}, func(r *result) { r.fault.clockJumps = 2 }, "caught 2 of 6 clock jumps"},
		{"majority-down silent", &scenario{name: "m", judge: judgeMajorityDown}, func(r *result) {}, "no attempt reported the quorum unavailable"},
		{"majority-down slow", &scenario{name: "m", judge: judgeMajorityDown}, func(r *result) {
			r.attempts = []attempt{{result: "unavailable", latency: 2 * time.Second}}
		}, "quorum unavailable after"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := clean()
			tc.break_(&res)
			r := tc.sc.row(cfg, []result{clean(), res})
			assert.False(t, r.Held)
			assert.Contains(t, r.Problems, tc.want)
		})
	}
}

// TestMemStore: the memory store refuses a claim or write with an older fence, takes an equal
// one (claim then write with one fence), and keeps the shadow rows unchecked.
func TestMemStore(t *testing.T) {
	s, err := startMemStore()
	require.NoError(t, err)
	t.Cleanup(s.close)
	b := httpBackend{base: s.url, http: &http.Client{Timeout: 5 * time.Second}}
	ctx := context.Background()
	call := func(kind string, f uint64, job int64) answer {
		a, err := b.call(ctx, kind, "r", f, job, 1)
		require.NoError(t, err)
		return a
	}
	assert.Equal(t, answer{Outcome: chaoscheck.OK, Job: 0}, call("claim", 5, 0))
	assert.Equal(t, chaoscheck.OK, call("write", 5, 0).Outcome)
	assert.Equal(t, answer{Outcome: chaoscheck.OK, Job: 1}, call("claim", 7, 0))
	assert.Equal(t, chaoscheck.Rejected, call("write", 5, 1).Outcome)
	assert.Equal(t, chaoscheck.Rejected, call("claim", 6, 0).Outcome)
	assert.Equal(t, chaoscheck.OK, call("write", 7, 1).Outcome)
	call("shadow-write", 0, 0)
	call("shadow-write", 0, 0)
	assert.Equal(t, int64(2), call("shadow-read", 0, 0).Job)

	f := s.final()
	assert.Equal(t, []chaoscheck.Entry{{Job: 0, Fence: 5, Worker: 1}, {Job: 1, Fence: 7, Worker: 1}}, f.Fenced["r"])
	assert.Len(t, f.Shadow["r"], 2)
}

func TestOutcome(t *testing.T) {
	for err, want := range map[error]string{
		nil:                          "acquired",
		redlock.ErrNotAcquired:       "contended",
		redlock.ErrQuorumUnavailable: "unavailable",
		errors.Join(redlock.ErrFenceUnavailable, redlock.ErrQuorumUnavailable): "fence_unavailable",
		errors.New("boom"): "error",
	} {
		assert.Equal(t, want, outcome(err), "%v", err)
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
