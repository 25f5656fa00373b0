package choose

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// small is a run the suite can afford under the race detector on two loaded cores: generous
// node timeouts and leases, short rows.
func small(options ...string) Config {
	return Config{
		Options:     options,
		Concurrency: []int{1, 4},
		Duration:    200 * time.Millisecond,
		Keys:        100,
		TTL:         5 * time.Second,
		NodeTimeout: 200 * time.Millisecond,
		Lease:       500 * time.Millisecond,
		Require:     os.Getenv("CI") == "true",
	}
}

// skipped skips the test when Run skipped an option (never under CI, where Run fails instead).
func skipped(t *testing.T, rep *Report) {
	t.Helper()
	if len(rep.Skipped) > 0 {
		t.Skipf("skipped: %v", rep.Skipped)
	}
}

func TestRunMeasuresEachCell(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var log strings.Builder
	cfg := small()
	cfg.Progress = &log
	rep, err := Run(ctx, cfg)
	t.Log(log.String())
	require.NoError(t, err)
	skipped(t, rep)
	byOption := map[string][]Row{}
	for _, r := range rep.Results {
		byOption[r.Option] = append(byOption[r.Option], r)
		t.Logf("%+v", r)
	}
	require.Len(t, byOption, 4)
	for name, rows := range byOption {
		require.Len(t, rows, 2, name)
		for i, r := range rows {
			assert.Equal(t, cfg.Concurrency[i], r.Concurrency, name)
			assert.Positive(t, r.Cycles, name)
			assert.Positive(t, r.CyclesPerSec, name)
			assert.Positive(t, r.AcquireP50Us, name)
			assert.LessOrEqual(t, r.AcquireP50Us, r.AcquireP99Us, name)
			assert.NotEmpty(t, r.Fence, name)
		}
	}
	first := func(name string) Row { return byOption[name][0] }
	assert.True(t, first("single-redis").StaleWriteAccepted, first("single-redis").StaleWrite)
	assert.Equal(t, "none", first("single-redis").Fence)
	for _, name := range []string{"redlock", "etcd", "postgres"} {
		assert.False(t, first(name).StaleWriteAccepted, name)
		assert.True(t, strings.HasPrefix(first(name).StaleWrite, "refused: "), "%s: %s", name, first(name).StaleWrite)
	}
	assert.True(t, strings.HasPrefix(first("single-redis").AfterFailover, "lost: "), first("single-redis").AfterFailover)
	assert.True(t, strings.HasPrefix(first("redlock").AfterFailover, "kept: "), first("redlock").AfterFailover)
	assert.True(t, strings.HasPrefix(first("etcd").AfterFailover, "kept: "), first("etcd").AfterFailover)
	assert.True(t, strings.HasPrefix(first("postgres").AfterFailover, "not run: "), first("postgres").AfterFailover)
}
