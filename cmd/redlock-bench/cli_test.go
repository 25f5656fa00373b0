package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/cmd/redlock-bench/internal/benchrun"
	"quorumlock.dev/cmd/redlock-bench/internal/chaos"
	"quorumlock.dev/cmd/redlock-bench/internal/output"
	"quorumlock.dev/cmd/redlock-bench/internal/report"
	"quorumlock.dev/cmd/redlock-bench/internal/reporttest"
	"quorumlock.dev/internal/harness/mariadbserver/mariadbtest"
	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
)

func TestMain(m *testing.M) {
	chaos.MaybeWorker()      // the chaos subcommand's workers are this binary started again
	benchrun.MaybeWorker()   // and so are those of the contended scenario's -procs rows
	redis.SetLogger(quiet{}) // the dead scenario dials dead masters on purpose
	code := m.Run()
	if err := mariadbtest.StopShared(); err != nil { // the fencing command's MariaDB
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// run is the command as a user runs it: arguments in, exit status and
// output back.
func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// runJSON runs the CLI and reads its JSON report. The runs that assert no
// errors pass -node-timeout 500ms: with the default 50 ms, a loaded machine
// under -race times calls out (CI saw "release on ...: node did not answer
// in time"), which is an outcome the row counts, not a fault of the CLI.
func runJSON(t *testing.T, args ...string) *report.Report {
	t.Helper()
	code, out, errOut := runCmd(t, append(args, "-o", "json")...)
	require.Equal(t, exitOK, code, errOut)
	rep, err := reporttest.ReadJSON(strings.NewReader(out))
	require.NoError(t, err)
	return rep
}

func TestParseDefaults(t *testing.T) {
	inv, err := parse(nil, &bytes.Buffer{})
	require.NoError(t, err)
	cfg := inv.Config
	assert.Equal(t, "embedded", cfg.Backend.Kind)
	assert.Equal(t, "healthy", cfg.Scenario)
	assert.Equal(t, 5, cfg.Masters)
	assert.Equal(t, []int{1, 8, 64}, cfg.Concurrency)
	assert.Equal(t, 2*time.Second, cfg.Duration)
	assert.Equal(t, 10*time.Second, cfg.TTL)
	assert.Equal(t, 50*time.Millisecond, cfg.NodeTimeout)
	assert.Equal(t, "text", inv.Format)

	inv, err = parse([]string{"-addrs", "127.0.0.1:1, 127.0.0.1:2,127.0.0.1:3", "-masters", "3", "-n", "100", "-ttl", "30s", "-hold", "2ms"}, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, "addrs", inv.Config.Backend.Kind)
	assert.Equal(t, []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}, inv.Config.Backend.Addrs)
	assert.Equal(t, int64(100), inv.Config.Cycles)
	assert.Zero(t, inv.Config.Duration)
	assert.Equal(t, 2*time.Millisecond, inv.Config.Hold)
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-nope"},
		{"-c", "one"},
		{"-c", "0"},
		{"-o", "xml"},
		{"-scenario", "stormy"},
		{"-scenario", "dead", "-dead", "6"},
		{"-scenario", "slow", "-delay", "0s"},
		{"-masters", "0"},
		{"-ttl", "10ms"},
		{"-keys", "0"},
		{"-n", "10", "-d", "1s"},
		{"-d", "0s"},
		{"-backend", "redis-server", "-addrs", "127.0.0.1:1"},
		{"-backend", "addrs"},
		{"-backend", "cloud"},
		{"-single-addr", "127.0.0.1:1"},
		{"-plot", "chart.txt"},
		{"-rounds", "0"},
		{"-clients", "-1"},
		{"-clients", "4"}, // the healthy scenario
		{"-procs", "-1"},
		{"-procs", "65", "-scenario", "contended"},
		{"-procs", "2"}, // the healthy scenario
		{"extra"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, out, errOut := runCmd(t, args...)
			assert.Equal(t, exitUsage, code)
			assert.Empty(t, out)
			assert.Contains(t, errOut, "usage: redlock-bench")
		})
	}
	code, _, _ := runCmd(t, "-h")
	assert.Equal(t, exitOK, code, "-h is not an error")
}

// TestEmbeddedRun: the default backend end to end, on a machine with no
// Redis at all.
func TestEmbeddedRun(t *testing.T) {
	rep := runJSON(t, "-d", "200ms", "-c", "1,4", "-rounds", "2", "-node-timeout", "500ms")
	assert.Equal(t, "embedded", rep.Backend)
	assert.True(t, rep.ServersInProcess, "allocs/op counts miniredis too, and the report must say so")
	assert.Len(t, rep.Servers, 7)
	require.Len(t, rep.Results, 4)
	for _, r := range rep.Results {
		assert.Positive(t, r.Acquired, "%s c=%d acquired nothing", r.Variant, r.Concurrency)
		assert.Zero(t, r.Errors, r.FirstError)
		assert.Zero(t, r.Unavailable)
		assert.Positive(t, r.AcquireP50Us)
		assert.GreaterOrEqual(t, r.AcquireMaxUs, r.AcquireP999Us)
		assert.GreaterOrEqual(t, r.AcquireP99Us, r.AcquireP50Us)
		assert.Positive(t, r.AllocsPerOp)
		assert.Equal(t, r.Attempts, r.Acquired+r.Contended+r.Unavailable+r.Errors)
		switch r.Mode {
		case "single":
			assert.Equal(t, 1, r.Masters)
		case "redlock":
			assert.Equal(t, 5, r.Masters)
			assert.Equal(t, "single", r.RatioOf)
			assert.Positive(t, r.RatioP50)
		default:
			t.Errorf("unexpected mode %q", r.Mode)
		}
	}
}

func TestCyclesAndCSV(t *testing.T) {
	code, out, errOut := runCmd(t, "-n", "40", "-c", "2", "-o", "csv", "-masters", "3", "-node-timeout", "500ms")
	require.Equal(t, exitOK, code, errOut)
	rows, err := reporttest.ReadCSV(strings.NewReader(out))
	require.NoError(t, err)
	require.Len(t, rows, 2)
	for _, r := range rows {
		assert.Equal(t, int64(40), r.Attempts, "-n counts attempts per row")
	}
}

func TestFullContention(t *testing.T) {
	// A node timeout with room for a loaded machine under -race: the test is
	// about contention, not about 50 ms.
	rep := runJSON(t, "-d", "1s", "-c", "8", "-keys", "1", "-hold", "1ms", "-node-timeout", "500ms")
	for _, r := range rep.Results {
		assert.Positive(t, r.Acquired)
		assert.Positive(t, r.Contended, "eight goroutines on one key must collide")
		assert.Zero(t, r.Errors, r.FirstError)
	}
}

// TestContendedScenario: goroutines wait in Lock for one resource, and the
// rows say how long, how evenly, and that no two ever held it at once.
func TestContendedScenario(t *testing.T) {
	inv, err := parse([]string{"-scenario", "contended"}, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, 1, inv.Config.Keys, "one resource unless -keys says otherwise")

	// A node timeout and a TTL with room for a loaded machine under -race.
	code, out, errOut := runCmd(t, "-scenario", "contended", "-d", "300ms", "-c", "4", "-hold", "1ms",
		"-node-timeout", "500ms", "-ttl", "10s", "-o", "csv")
	require.Equal(t, exitOK, code, errOut)
	rows, err := reporttest.ReadCSV(strings.NewReader(out))
	require.NoError(t, err, "the CSV header is the columns of this version")
	require.Len(t, rows, 4)
	var variants []string
	for _, r := range rows {
		variants = append(variants, r.Variant)
	}
	assert.Equal(t, []string{"single", "redlock", "redlock fair", "redlock poll"}, variants)
	assert.Equal(t, []int{1, 5, 5, 5}, []int{rows[0].Masters, rows[1].Masters, rows[2].Masters, rows[3].Masters})
	for _, r := range rows {
		assert.Equal(t, "contended", r.Scenario)
		assert.Equal(t, 4, r.Concurrency)
		assert.Equal(t, 1, r.Keys)
		assert.Equal(t, 1.0, r.HoldMs)
		assert.Zero(t, r.Violations, "%s: two goroutines held the lock at once", r.Variant)
		assert.Zero(t, r.Errors, r.FirstError)
		assert.Zero(t, r.Unavailable)
		assert.Positive(t, r.Acquired)
		assert.Positive(t, r.SectionsPerSec)
		assert.Positive(t, r.WaitP99Us)
		assert.GreaterOrEqual(t, r.HandoffP99Us, r.HandoffP50Us)
		// Without fairness, the goroutine that just released may take the
		// lock back every time (poll: waiters sleep 50-100 ms), so in
		// 300 ms a waiter may win nothing: fairness 0 is a finding there.
		assert.GreaterOrEqual(t, r.Fairness, 0.0)
		assert.LessOrEqual(t, r.Fairness, 1.0)
		assert.Empty(t, r.RatioOf)
		assert.Equal(t, r.Attempts, r.Acquired+r.Contended+r.Unavailable+r.Errors)
		// Every Lock makes one attempt at least; a split needs masters to split.
		assert.GreaterOrEqual(t, r.Rounds, r.Acquired, r.Variant)
		assert.LessOrEqual(t, r.LostRounds, r.Rounds, r.Variant)
		assert.LessOrEqual(t, r.SplitRounds, r.LostRounds, r.Variant)
		assert.InDelta(t, splitPct(r), r.SplitPct, 1e-9, r.Variant)
		if r.Masters == 1 {
			assert.Zero(t, r.SplitRounds, "%s: one master cannot split its vote", r.Variant)
		}
	}

	// Spread over many resources, every goroutine gets turns: fairness is
	// carried through to the row, above 0 and at most 1.
	rep := runJSON(t, "-scenario", "contended", "-keys", "64", "-d", "300ms", "-c", "4", "-rounds", "2", "-node-timeout", "500ms")
	require.Len(t, rep.Results, 4)
	for _, r := range rep.Results {
		assert.Zero(t, r.Violations)
		assert.Greater(t, r.Fairness, 0.0, "%s: a goroutine had no turn at 64 resources", r.Variant)
		assert.LessOrEqual(t, r.Fairness, 1.0)
	}

	code, out, errOut = runCmd(t, "-scenario", "contended", "-d", "100ms", "-c", "2")
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "handoff p99 µs")
	assert.Contains(t, out, "fairness")
	assert.Contains(t, out, "split %")

	// -clients adds rows where the goroutines lock through separate
	// clients, plain and fair, and the redsync baseline over as many groups
	// of go-redis clients, each checked like the others.
	rep = runJSON(t, "-scenario", "contended", "-clients", "3", "-d", "300ms", "-c", "3", "-rounds", "1", "-node-timeout", "500ms")
	var separate []string
	for _, r := range rep.Results {
		assert.Zero(t, r.Violations, r.Variant)
		if strings.HasSuffix(r.Variant, " 3 clients") {
			separate = append(separate, r.Variant)
			assert.Positive(t, r.Acquired, "%s: no section", r.Variant)
			assert.Zero(t, r.Errors, "%s: %s", r.Variant, r.FirstError)
			assert.Zero(t, r.Unavailable, r.Variant)
			assert.Positive(t, r.SectionsPerSec, r.Variant)
			assert.Positive(t, r.WaitP99Us, r.Variant)
			assert.GreaterOrEqual(t, r.HandoffP99Us, r.HandoffP50Us, r.Variant)
			assert.GreaterOrEqual(t, r.Rounds, r.Acquired, r.Variant)
			assert.LessOrEqual(t, r.SplitRounds, r.LostRounds, r.Variant)
			assert.InDelta(t, splitPct(r), r.SplitPct, 1e-9, r.Variant)
			assert.Equal(t, r.Attempts, r.Acquired+r.Contended+r.Unavailable+r.Errors, r.Variant)
		}
		if r.Mode == "redsync" {
			assert.Equal(t, 5, r.Masters)
			assert.Equal(t, "go-redis", r.Driver, "redsync's rows go through its go-redis adapter")
		}
	}
	assert.ElementsMatch(t, []string{"redlock 3 clients", "redlock fair 3 clients", "redsync 3 clients"}, separate)
}

// TestContendedProcs: -procs adds rows whose goroutines run in worker
// processes, this binary started again, merged into one row each and checked
// like the others; the violations come from the merged log of sections.
func TestContendedProcs(t *testing.T) {
	// A TTL of 2 s bounds the slices: a fair Lock called before a slice's
	// end has been seen to wait out a whole TTL on the embedded backend.
	rep := runJSON(t, "-scenario", "contended", "-procs", "2", "-d", "400ms", "-c", "3", "-rounds", "2",
		"-node-timeout", "500ms", "-ttl", "2s")
	var procs []string
	for _, r := range rep.Results {
		assert.Zero(t, r.Violations, r.Variant)
		if !strings.HasSuffix(r.Variant, " 2 procs") {
			continue
		}
		procs = append(procs, r.Variant)
		assert.Equal(t, 5, r.Masters)
		assert.Positive(t, r.Acquired, "%s: no section", r.Variant)
		assert.Zero(t, r.Errors, "%s: %s", r.Variant, r.FirstError)
		assert.Zero(t, r.Unavailable, r.Variant)
		assert.Positive(t, r.SectionsPerSec, r.Variant)
		assert.Positive(t, r.WaitP99Us, r.Variant)
		assert.Positive(t, r.CycleP50Us, r.Variant)
		assert.Positive(t, r.HandoffP50Us, "%s: no handoff between goroutines", r.Variant)
		assert.GreaterOrEqual(t, r.HandoffP99Us, r.HandoffP50Us, r.Variant)
		assert.GreaterOrEqual(t, r.Fairness, 0.0, r.Variant)
		assert.LessOrEqual(t, r.Fairness, 1.0, r.Variant)
		assert.GreaterOrEqual(t, r.Rounds, r.Acquired, r.Variant)
		assert.LessOrEqual(t, r.SplitRounds, r.LostRounds, r.Variant)
		assert.InDelta(t, splitPct(r), r.SplitPct, 1e-9, r.Variant)
		assert.Equal(t, r.Attempts, r.Acquired+r.Contended+r.Unavailable+r.Errors, r.Variant)
		assert.Positive(t, r.AllocsPerOp, "%s: the workers' allocations count", r.Variant)
	}
	assert.ElementsMatch(t, []string{"redlock 2 procs", "redlock fair 2 procs"}, procs)

	// -n splits each slice's attempts among the workers: the row makes them all.
	rep = runJSON(t, "-scenario", "contended", "-procs", "2", "-n", "30", "-c", "3", "-rounds", "2", "-node-timeout", "500ms", "-ttl", "2s")
	for _, r := range rep.Results {
		assert.Equal(t, int64(30), r.Attempts, r.Variant)
		assert.Zero(t, r.Violations, r.Variant)
	}

	// A lease shorter than the hold runs out under its holder: the next
	// holder, in another process, begins while it holds on, and the merged
	// log must see it.
	rep = runJSON(t, "-scenario", "contended", "-procs", "2", "-d", "600ms", "-c", "2", "-rounds", "1",
		"-ttl", "100ms", "-hold", "150ms")
	for _, r := range rep.Results {
		if strings.HasSuffix(r.Variant, " 2 procs") {
			assert.Positive(t, r.Violations, "%s: overlapping sections across processes went unseen", r.Variant)
		}
	}
}

// splitPct is what a row's split_pct must be: split over lost rounds.
func splitPct(r report.Row) float64 {
	if r.LostRounds == 0 {
		return 0
	}
	return 100 * float64(r.SplitRounds) / float64(r.LostRounds)
}

// TestContendedProcsAddrs: workers reach -addrs servers as the run does,
// through the addresses it was given, with the fence counter.
func TestContendedProcsAddrs(t *testing.T) {
	servers := redistest.StartN(t, 5, redisserver.Options{})
	var addrs []string
	for _, s := range servers[:3] {
		addrs = append(addrs, "redis://"+s.Addr())
	}
	rep := runJSON(t, "-addrs", strings.Join(addrs, ","), "-single-addr", servers[3].Addr(), "-fence-addr", servers[4].Addr(),
		"-fence", "-masters", "3", "-scenario", "contended", "-procs", "2", "-d", "200ms", "-c", "2", "-rounds", "1",
		"-ttl", "2s", "-node-timeout", "500ms")
	var procs int
	for _, r := range rep.Results {
		if !strings.HasSuffix(r.Variant, " 2 procs") {
			continue
		}
		procs++
		assert.True(t, r.Fence)
		assert.Positive(t, r.Acquired, r.Variant)
		assert.Zero(t, r.Errors, "%s: %s", r.Variant, r.FirstError)
		assert.Zero(t, r.Violations, r.Variant)
	}
	assert.Equal(t, 2, procs)
	// The run deletes its keys when it ends; a fair waiter's queued call
	// that lands after that (a worker process's last attempt on a loaded
	// machine) queues its entry again, under keys that expire with the
	// entry TTL: 2 s here (4 node timeouts).
	for _, s := range servers {
		var keys []string
		if !assert.Eventually(t, func() bool {
			var err error
			keys, err = redistest.Client(t, s.Addr()).Keys(context.Background(), "*redlock-bench-*").Result()
			return err == nil && len(keys) == 0
		}, 10*time.Second, 50*time.Millisecond, "the run left keys on %s", s.Addr()) {
			t.Logf("left on %s: %v", s.Addr(), keys)
		}
	}
}

// TestUncontendedRowsCarryNoContendedFigures: the new columns are the
// contended scenario's; the other scenarios' rows leave them at zero.
func TestUncontendedRowsCarryNoContendedFigures(t *testing.T) {
	rep := runJSON(t, "-d", "100ms", "-c", "2", "-rounds", "1", "-node-timeout", "500ms")
	for _, r := range rep.Results {
		assert.Zero(t, r.SectionsPerSec)
		assert.Zero(t, r.WaitP99Us)
		assert.Zero(t, r.HandoffP50Us)
		assert.Zero(t, r.Fairness)
		assert.Zero(t, r.Violations)
		assert.Zero(t, r.Rounds)
		assert.Positive(t, r.Acquired)
	}
}

func TestSlowScenario(t *testing.T) {
	rep := runJSON(t, "-scenario", "slow", "-delay", "30ms", "-d", "300ms", "-c", "1", "-node-timeout", "500ms")
	require.Len(t, rep.Results, 2)
	byVariant := map[string]report.Row{}
	for _, r := range rep.Results {
		byVariant[r.Variant] = r
		assert.Positive(t, r.Acquired, "a slow master must not stop the lock")
		assert.Zero(t, r.Unavailable)
		assert.Zero(t, r.Errors, r.FirstError)
	}
	assert.Zero(t, byVariant["delay_ms=0"].DelayMs)
	assert.Equal(t, 30.0, byVariant["delay_ms=30"].DelayMs)
	assert.Equal(t, "delay_ms=0", byVariant["delay_ms=30"].RatioOf)
}

func TestDeadScenario(t *testing.T) {
	t.Run("minority dead", func(t *testing.T) {
		rep := runJSON(t, "-scenario", "dead", "-dead", "2", "-d", "300ms", "-c", "1", "-node-timeout", "500ms")
		require.Len(t, rep.Results, 2)
		dead := rep.Results[1]
		assert.Equal(t, 2, dead.Dead)
		assert.Positive(t, dead.Acquired, "three of five masters are a majority")
		assert.Zero(t, dead.Unavailable)
		assert.Equal(t, "healthy", dead.RatioOf)
	})
	t.Run("majority dead", func(t *testing.T) {
		rep := runJSON(t, "-scenario", "dead", "-dead", "3", "-d", "300ms", "-c", "1")
		dead := rep.Results[1]
		assert.Equal(t, 3, dead.Dead)
		assert.Zero(t, dead.Acquired)
		assert.Positive(t, dead.Unavailable, "every attempt must end in ErrQuorumUnavailable")
		assert.Zero(t, dead.Errors)
		assert.Positive(t, rep.Results[0].Acquired)
	})
}

func TestScaleScenario(t *testing.T) {
	rep := runJSON(t, "-scenario", "scale", "-d", "250ms", "-c", "1", "-rounds", "1", "-node-timeout", "500ms")
	require.Len(t, rep.Results, len(benchrun.ScaleMasters))
	for i, r := range rep.Results {
		assert.Equal(t, benchrun.ScaleMasters[i], r.Masters)
		assert.Positive(t, r.Acquired)
		if r.Masters != 3 {
			assert.Equal(t, "masters=3", r.RatioOf)
		}
	}
}

func TestFence(t *testing.T) {
	rep := runJSON(t, "-fence", "-d", "200ms", "-c", "2", "-node-timeout", "500ms")
	for _, r := range rep.Results {
		assert.True(t, r.Fence)
		assert.Positive(t, r.Acquired)
		assert.Zero(t, r.Errors, r.FirstError)
	}
}

func TestPlotFlag(t *testing.T) {
	path := filepath.Join(t.TempDir(), "latency.svg")
	code, _, errOut := runCmd(t, "-d", "100ms", "-c", "1", "-plot", path)
	require.Equal(t, exitOK, code, errOut)
	info, err := os.Stat(path)
	require.NoError(t, err)
	assert.Positive(t, info.Size())
}

// TestRedisServerBackend: real servers, started and stopped by the run.
func TestRedisServerBackend(t *testing.T) {
	redistest.Need(t)
	rep := runJSON(t, "-backend", "redis-server", "-d", "200ms", "-c", "1", "-masters", "3", "-node-timeout", "500ms")
	assert.Equal(t, "redis-server", rep.Backend)
	assert.False(t, rep.ServersInProcess)
	require.Len(t, rep.Servers, 5)
	for _, s := range rep.Servers {
		assert.Regexp(t, `^\d+\.`, s.Version)
		assertGone(t, s.Addr)
	}
	for _, r := range rep.Results {
		assert.Positive(t, r.Acquired)
		assert.Zero(t, r.Errors, r.FirstError)
	}
}

// TestInterruptStopsServers: a run cut short by its context (Ctrl-C)
// still stops the servers it started.
func TestInterruptStopsServers(t *testing.T) {
	redistest.Need(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(time.Second, cancel)
	var out, errOut bytes.Buffer
	start := time.Now()
	code := run(ctx, []string{"-backend", "redis-server", "-d", "30s", "-c", "1"}, &out, &errOut)
	assert.Equal(t, exitError, code)
	assert.Less(t, time.Since(start), 20*time.Second)
	assert.Contains(t, errOut.String(), "context canceled")
	// The servers' addresses are not in the output; look for no listener
	// among redis-server processes started by this test binary instead.
	assertNoChildRedis(t)
}

// TestAddrsBackend: existing servers are used, not flushed, and the run's
// keys are removed afterwards.
func TestAddrsBackend(t *testing.T) {
	servers := redistest.StartN(t, 5, redisserver.Options{})
	var addrs []string
	for _, s := range servers[:3] {
		addrs = append(addrs, s.Addr())
	}
	other := redistest.Client(t, servers[0].Addr())
	require.NoError(t, other.Set(context.Background(), "lock:someone-else", "x", 0).Err())

	rep := runJSON(t, "-addrs", strings.Join(addrs, ","), "-single-addr", servers[3].Addr(),
		"-fence-addr", servers[4].Addr(), "-fence", "-masters", "3", "-d", "200ms", "-c", "2")
	assert.Equal(t, "addrs", rep.Backend)
	for _, r := range rep.Results {
		assert.Positive(t, r.Acquired)
	}
	for _, s := range servers {
		c := redistest.Client(t, s.Addr())
		keys, err := c.Keys(context.Background(), "*redlock-bench-*").Result()
		require.NoError(t, err)
		assert.Empty(t, keys, "the run left keys on %s", s.Addr())
	}
	v, err := other.Get(context.Background(), "lock:someone-else").Result()
	require.NoError(t, err)
	assert.Equal(t, "x", v, "a key that is not the run's was touched")
}

func TestUnreachableServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	code, out, errOut := runCmd(t, "-addrs", addr, "-masters", "1", "-d", "100ms", "-c", "1")
	assert.Equal(t, exitError, code)
	assert.Empty(t, out)
	assert.Equal(t, 1, strings.Count(errOut, "\n"), "one clear line: %q", errOut)
	assert.Contains(t, errOut, addr)
	assert.Contains(t, errOut, "master")
}

func assertGone(t *testing.T, addr string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		conn.Close()
		t.Errorf("server %s still listens after the run", addr)
	}
}

// assertNoChildRedis checks that no redis-server whose parent is this test
// process is left running.
func assertNoChildRedis(t *testing.T) {
	t.Helper()
	self := os.Getpid()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	for _, e := range entries {
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || !strings.Contains(s[:i], "(redis-server") {
			continue
		}
		fields := strings.Fields(s[i+1:])
		if len(fields) > 1 && fields[1] == strconv.Itoa(self) && fields[0] != "Z" {
			t.Errorf("redis-server pid %s started by this test is still running", e.Name())
		}
	}
}

// TestDocListsColumns: the column list in the manual's Output section is the
// one the CSV writer uses, in the same order.
func TestDocListsColumns(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	_, section, found := strings.Cut(string(src), "\n// # Output\n")
	require.True(t, found, "doc.go has no Output section")
	var listed []string
	for _, line := range strings.Split(section, "\n") {
		if rest, ok := strings.CutPrefix(line, "//\t"); ok && rest != "" && rest[0] != ' ' {
			listed = append(listed, strings.Fields(rest)[0])
		}
	}
	assert.Equal(t, output.CSVColumns(), listed)
}

// TestSettingsTheLockRefuses: a TTL that the library refuses (no validity
// can be left after the drift allowance and the node timeout) ends the run
// with the library's message, instead of a table of errors.
func TestSettingsTheLockRefuses(t *testing.T) {
	code, out, errOut := runCmd(t, "-ttl", "2ms", "-node-timeout", "1ms", "-d", "200ms", "-c", "1")
	assert.Equal(t, exitError, code)
	assert.Empty(t, out)
	assert.Contains(t, errOut, "invalid argument")
	assert.Contains(t, errOut, "ttl 2ms")
	assert.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
}
