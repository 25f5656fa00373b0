//go:build linux

package clockshim

import (
	"context"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/internal/harness/childproc/childproctest"
)

const installCompiler = "apt-get install -y gcc"

// newClock returns a clock in a temporary dir, closed when the test ends. A missing compiler
// fails the test under CI=true and skips it elsewhere.
func newClock(t testing.TB) *Clock {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := New(ctx, t.TempDir())
	if errors.Is(err, ErrNoCompiler) {
		childproctest.Missing(t, err, installCompiler)
	}
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })
	return c
}

// reading is one line of testdata/probe.c.
type reading struct {
	raw      int64 // real CLOCK_REALTIME, ns
	time     int64 // time(), s
	gtod     int64 // gettimeofday, µs
	real     int64 // clock_gettime(CLOCK_REALTIME), ns
	coarse   int64 // clock_gettime(CLOCK_REALTIME_COARSE), ns
	rawMono  int64 // real CLOCK_MONOTONIC, ns
	monotime int64 // clock_gettime(CLOCK_MONOTONIC), ns
}

// buildProbe compiles testdata/probe.c and returns a function that runs it with env added.
func buildProbe(t *testing.T) func(env ...string) reading {
	t.Helper()
	cc, err := compiler()
	if err != nil {
		childproctest.Missing(t, err, installCompiler)
	}
	src, err := filepath.Abs(filepath.Join("testdata", "probe.c"))
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), "probe")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, cc, "-O2", "-Wall", "-o", bin, src).CombinedOutput()
	require.NoError(t, err, "%s", out)

	return func(env ...string) reading {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.Output()
		require.NoError(t, err)
		f := strings.Fields(string(out))
		require.Len(t, f, 7, "probe printed %q", out)
		v := make([]int64, len(f))
		for i, s := range f {
			v[i], err = strconv.ParseInt(s, 10, 64)
			require.NoError(t, err)
		}
		return reading{v[0], v[1], v[2], v[3], v[4], v[5], v[6]}
	}
}

// requireShifted checks that every wall clock of r reads the real one plus offset, and that the
// monotonic clock is untouched. The probe reads its clocks within microseconds of each other;
// the slack allows for a process descheduled between two reads on a loaded machine.
func requireShifted(t *testing.T, r reading, offset time.Duration) {
	t.Helper()
	const slack = 5 * time.Second
	want := r.raw + int64(offset)
	assert.InDelta(t, want, r.time*1e9, float64(slack+time.Second), "time")
	assert.InDelta(t, want, r.gtod*1e3, float64(slack), "gettimeofday")
	assert.InDelta(t, want, r.real, float64(slack), "CLOCK_REALTIME")
	assert.InDelta(t, want, r.coarse, float64(slack), "CLOCK_REALTIME_COARSE")
	assert.InDelta(t, r.rawMono, r.monotime, float64(slack), "CLOCK_MONOTONIC")
}

func TestShiftsWallClocksOnly(t *testing.T) {
	probe, c := buildProbe(t), newClock(t)
	requireShifted(t, probe(c.Env()...), 0)

	c.Jump(1000 * time.Hour)
	assert.Equal(t, 1000*time.Hour, c.Offset())
	requireShifted(t, probe(c.Env()...), 1000*time.Hour)

	c.Jump(-3000 * time.Hour) // cumulative: 2000 h behind
	assert.Equal(t, -2000*time.Hour, c.Offset())
	requireShifted(t, probe(c.Env()...), -2000*time.Hour)
}

func TestNoStateNoShift(t *testing.T) {
	probe, c := buildProbe(t), newClock(t)
	c.Jump(1000 * time.Hour)
	lib := c.Env()[0] // LD_PRELOAD=...
	require.True(t, strings.HasPrefix(lib, "LD_PRELOAD="))

	requireShifted(t, probe(lib, envVar+"="), 0)
	requireShifted(t, probe(lib, envVar+"="+filepath.Join(t.TempDir(), "missing")), 0)
	short := filepath.Join(t.TempDir(), "short")
	require.NoError(t, os.WriteFile(short, []byte{1, 2, 3}, 0o644))
	requireShifted(t, probe(lib, envVar+"="+short), 0)
	requireShifted(t, probe(), 0) // no shim at all
}

func TestSetRate(t *testing.T) {
	probe, c := buildProbe(t), newClock(t)
	c.Jump(time.Hour)

	// Stopped: every read gives the same instant, an hour ahead of when it stopped.
	before := time.Now()
	c.SetRate(0)
	after := time.Now()
	first, second := probe(c.Env()...), probe(c.Env()...)
	assert.Equal(t, first.real, second.real)
	assert.Equal(t, first.gtod, second.gtod)
	assert.GreaterOrEqual(t, first.real, before.Add(time.Hour).UnixNano())
	assert.LessOrEqual(t, first.real, after.Add(time.Hour).UnixNano())

	// Ten times fast: between two runs the clock advances ten times the real time between them,
	// which lies between the bounds measured around the runs (wall readings, as the probe's).
	c.SetRate(10)
	start := c.Offset()
	b1 := time.Now().UnixNano()
	r1 := probe(c.Env()...)
	a1 := time.Now().UnixNano()
	time.Sleep(50 * time.Millisecond)
	b2 := time.Now().UnixNano()
	r2 := probe(c.Env()...)
	a2 := time.Now().UnixNano()
	const rounding = int64(time.Microsecond)
	assert.GreaterOrEqual(t, r2.real-r1.real, 10*(b2-a1)-rounding)
	assert.LessOrEqual(t, r2.real-r1.real, 10*(a2-b1)+rounding)
	assert.GreaterOrEqual(t, c.Offset()-start, 9*time.Duration(b2-a1))

	// Back to real time: the offset built up stays and no longer grows.
	c.SetRate(1)
	kept := c.Offset()
	time.Sleep(10 * time.Millisecond)
	assert.Equal(t, kept, c.Offset())
	requireShifted(t, probe(c.Env()...), kept)
}

func TestSetRateRejects(t *testing.T) {
	c := newClock(t)
	for _, rate := range []float64{-1, math.NaN(), math.Inf(1)} {
		assert.Panics(t, func() { c.SetRate(rate) }, "rate %v", rate)
	}
	assert.Equal(t, time.Duration(0), c.Offset(), "a refused rate changes nothing")
}

func TestClose(t *testing.T) {
	c := newClock(t)
	require.NoError(t, c.Close())
	require.NoError(t, c.Close())
	assert.PanicsWithValue(t, "clockshim: Jump after Close", func() { c.Jump(time.Second) })
	assert.PanicsWithValue(t, "clockshim: SetRate after Close", func() { c.SetRate(2) })
}

func TestNewRejectsPreloadSeparators(t *testing.T) {
	for _, name := range []string{"a:b", "a b"} {
		dir := filepath.Join(t.TempDir(), name)
		require.NoError(t, os.Mkdir(dir, 0o700))
		_, err := New(t.Context(), dir)
		assert.ErrorContains(t, err, "clockshim: LD_PRELOAD")
	}
}

func TestNoCompiler(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := New(t.Context(), t.TempDir())
	assert.ErrorIs(t, err, ErrNoCompiler)

	childproctest.CheckMissing(t, installCompiler, map[string]func(testing.TB){
		"newClock": func(t testing.TB) { newClock(t) },
	})
}

func TestConcurrentJumps(t *testing.T) {
	c := newClock(t)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				c.Jump(time.Millisecond)
				_ = c.Offset()
			}
		})
	}
	wg.Wait()
	assert.Equal(t, 400*time.Millisecond, c.Offset(), "no jump is lost")
}
