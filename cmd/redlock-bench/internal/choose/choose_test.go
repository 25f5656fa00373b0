package choose

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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
		if os.Getenv("CI") == "true" {
			t.Fatalf("skipped under CI=true: %v", rep.Skipped)
		}
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

func TestMain(m *testing.M) {
	// go-redis logs each failed dial; the failover experiments kill servers on purpose.
	redis.SetLogger(silent{})
	os.Exit(m.Run())
}

type silent struct{}

func (silent) Printf(context.Context, string, ...any) {}

// TestGuardIsWhatRefuses: Redlock's late write is refused by fence.RedisGuard, not by the
// lock: the same five masters, the same pause, and a plain SET lands.
func TestGuardIsWhatRefuses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := small()
	require.NoError(t, cfg.defaults())
	o, err := openRedis(ctx, cfg, 5)
	require.NoError(t, err)
	defer o.close()
	accepted, seen, err := o.stale(ctx, cfg)
	require.NoError(t, err)
	assert.False(t, accepted, seen)
	o.guarded = false
	accepted, seen, err = o.stale(ctx, cfg)
	require.NoError(t, err)
	assert.True(t, accepted, seen)
}

func TestMissingServer(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no etcd, initdb or redis-server on it
	for _, name := range []string{"etcd", "postgres"} {
		cfg := small(name)
		cfg.Require = false
		rep, err := Run(context.Background(), cfg)
		require.NoError(t, err, name)
		assert.Empty(t, rep.Results, name)
		require.Len(t, rep.Skipped, 1, name)
		assert.Equal(t, name, rep.Skipped[0].Option)
		assert.Contains(t, rep.Skipped[0].Reason, "not installed")

		cfg.Require = true
		_, err = Run(context.Background(), cfg)
		assert.ErrorIs(t, err, ErrNotInstalled, name)
	}
	cfg := small("single-redis")
	cfg.Backend = "redis-server"
	cfg.Require = true
	_, err := Run(context.Background(), cfg)
	assert.ErrorIs(t, err, ErrNotInstalled)
}

func TestConfigRejected(t *testing.T) {
	for _, c := range []Config{
		{Options: []string{"zookeeper"}},
		{Backend: "cloud"},
		{Concurrency: []int{0}},
		{Concurrency: []int{2000}},
		{Duration: -time.Second},
		{TTL: 500 * time.Millisecond},
		{Lease: time.Millisecond},
		{NodeTimeout: time.Second, Lease: 500 * time.Millisecond},
		{Keys: -1},
	} {
		_, err := Run(context.Background(), c)
		assert.ErrorIs(t, err, ErrConfig, "%+v", c)
	}
}

func TestWrite(t *testing.T) {
	rep := &Report{
		Started: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), Backend: "embedded", DurationS: 1, TTLms: 10000, Keys: 10,
		Results: []Row{
			{Option: "redlock", Concurrency: 1, AcquireP50Us: 120, AcquireP99Us: 900, CyclesPerSec: 4000.5, Fence: "INCR", AfterFailover: "kept: x"},
			{Option: "redlock", Concurrency: 8, AcquireP50Us: 300, AcquireP99Us: 2000, CyclesPerSec: 9000, Fence: "INCR", AfterFailover: "kept: x"},
		},
		Skipped: []Skip{{Option: "etcd", Reason: "choose: server not installed: etcd"}},
	}
	var text strings.Builder
	require.NoError(t, Write(&text, rep, "text"))
	lines := strings.Split(strings.TrimSpace(text.String()), "\n")
	require.Len(t, lines, 6, text.String())
	assert.Contains(t, lines[2], "stale write accepted")
	assert.Contains(t, lines[3], "kept: x")
	assert.NotContains(t, lines[4], "kept: x", "the option's columns once")
	assert.Equal(t, "skipped etcd: choose: server not installed: etcd", lines[5])

	var csvOut strings.Builder
	require.NoError(t, Write(&csvOut, rep, "csv"))
	rows := strings.Split(strings.TrimSpace(csvOut.String()), "\n")
	require.Len(t, rows, 3)
	assert.True(t, strings.HasPrefix(rows[0], "option,concurrency,attempts,cycles,"), rows[0])
	assert.Contains(t, rows[0], "acquire_p50_us,")
	assert.Contains(t, rows[0], "cycles_per_sec,fence,stale_write_accepted,stale_write,after_failover")
	assert.Contains(t, rows[1], ",4000.5,INCR,false,,kept: x")

	var js strings.Builder
	require.NoError(t, Write(&js, rep, "json"))
	var back Report
	require.NoError(t, json.Unmarshal([]byte(js.String()), &back))
	assert.Equal(t, rep.Results, back.Results)
	assert.Equal(t, rep.Skipped, back.Skipped)

	assert.ErrorIs(t, Write(io.Discard, rep, "yaml"), ErrConfig)

	pr := PlotReport(rep)
	require.Len(t, pr.Results, 2)
	assert.Equal(t, 5, pr.Results[0].Masters)
	assert.Equal(t, 900.0, pr.Results[0].AcquireP99Us)
}
