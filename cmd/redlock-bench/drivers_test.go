package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/cmd/redlock-bench/internal/benchrun"
	"quorumlock.dev/cmd/redlock-bench/internal/drivers"
	"quorumlock.dev/cmd/redlock-bench/internal/report"
	"quorumlock.dev/internal/harness/redistest"
)

func TestDriverFlag(t *testing.T) {
	inv, err := parse(nil, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, []string{"go-redis"}, inv.Config.Drivers, "go-redis alone unless -driver says otherwise")
	assert.False(t, inv.Config.Raw)

	inv, err = parse([]string{"-driver", "valkey-go, rueidis,go-redis-pipelined,rueidis", "-raw"}, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, []string{"valkey-go", "rueidis", "go-redis-pipelined"}, inv.Config.Drivers, "in the order given, each once")
	assert.True(t, inv.Config.Raw)
}

func TestUnknownDriver(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-driver", "redigo"}, `unknown driver "redigo" (want one or more of go-redis, go-redis-pipelined, rueidis, valkey-go)`},
		{[]string{"-driver", "go-redis,Rueidis"}, `unknown driver "Rueidis"`},
		{[]string{"-driver", " , "}, "none named"},
		{[]string{"-raw", "-scenario", "contended"}, "-raw) applies to the healthy scenario only"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var errOut bytes.Buffer
			_, err := parse(tt.args, &errOut)
			require.ErrorIs(t, err, benchrun.ErrConfig)
			if tt.args[0] == "-driver" {
				require.ErrorIs(t, err, drivers.ErrUnknown)
			}
			code, out, stderr := runCmd(t, tt.args...)
			assert.Equal(t, exitUsage, code)
			assert.Empty(t, out)
			first, _, _ := strings.Cut(stderr, "\n")
			assert.Contains(t, first, tt.want, "the first line says what is wrong")
			assert.Contains(t, stderr, "usage: redlock-bench")
		})
	}
	// benchrun refuses a name that did not come through the flag, too.
	cfg := benchrun.Config{Scenario: "healthy", Masters: 1, Concurrency: []int{1}, Cycles: 1, TTL: 10e9, NodeTimeout: 5e7, Keys: 1, Rounds: 1, Drivers: []string{"jedis"}}
	err := cfg.Validate()
	require.ErrorIs(t, err, benchrun.ErrConfig)
	require.ErrorIs(t, err, drivers.ErrUnknown)
}

// TestDefaultDriverLabels: without -driver the table is what it was, no
// row named by its driver; the JSON rows carry it all the same.
func TestDefaultDriverLabels(t *testing.T) {
	code, out, errOut := runCmd(t, "-n", "10", "-c", "1", "-masters", "3", "-rounds", "1", "-node-timeout", "500ms")
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "healthy   redlock 3m")
	assert.NotContains(t, out, "go-redis")

	rep := runJSON(t, "-n", "10", "-c", "1", "-masters", "3", "-rounds", "1", "-node-timeout", "500ms")
	assert.Equal(t, []string{"go-redis"}, rep.Config.Drivers)
	for _, r := range rep.Results {
		assert.Equal(t, "go-redis", r.Driver)
	}
	assert.Equal(t, report.DefaultDriver, drivers.Default)
}

// checkDriverRows: every driver has every variant's row, each labelled
// with its driver in the JSON, the text table and the plot's labels.
func checkDriverRows(t *testing.T, rep *report.Report, variants []string) {
	t.Helper()
	assert.Equal(t, drivers.Names, rep.Config.Drivers)
	got := map[string][]string{}
	labels := report.Labels(rep.Results, true)
	for i, r := range rep.Results {
		got[r.Driver] = append(got[r.Driver], r.Variant)
		assert.True(t, strings.HasPrefix(labels[i], r.Driver+" "), "chart label %q names no driver", labels[i])
		assert.Positive(t, r.Acquired, "%s %s: nothing acquired; first error: %s", r.Driver, r.Variant, r.FirstError)
		assert.Zero(t, r.Errors, "%s %s: %s", r.Driver, r.Variant, r.FirstError)
		assert.Zero(t, r.Violations, "%s %s", r.Driver, r.Variant)
		assert.Equal(t, r.Attempts, r.Acquired+r.Contended+r.Unavailable+r.Errors)
		if r.Mode == "raw" {
			assert.Equal(t, "single", r.RatioOf, "raw rows compare with their driver's single row")
			assert.Positive(t, r.RatioP50)
		}
	}
	for _, d := range drivers.Names {
		assert.ElementsMatch(t, variants, got[d], "rows of %s", d)
	}
}

// TestDriversEmbedded: every driver against the embedded backend, whose
// miniredis speaks the RESP3 that rueidis and valkey-go need; push wake-up
// included (the contended scenario).
func TestDriversEmbedded(t *testing.T) {
	all := strings.Join(drivers.Names, ",")
	rep := runJSON(t, "-driver", all, "-raw", "-n", "20", "-c", "2", "-masters", "3", "-rounds", "1", "-node-timeout", "500ms")
	checkDriverRows(t, rep, []string{"single", "redlock", "raw"})

	code, out, errOut := runCmd(t, "-driver", all, "-raw", "-n", "10", "-c", "1", "-masters", "3", "-rounds", "1", "-node-timeout", "500ms")
	require.Equal(t, exitOK, code, errOut)
	for _, d := range drivers.Names {
		for _, v := range []string{" single ", " redlock 3m ", " raw 3m "} {
			assert.Contains(t, out, "healthy   "+d+v, "the text table names %s's rows", d)
		}
	}
}

// TestDriversRedisServer: one short run per driver on real redis-server
// processes, the healthy scenario with the raw loop and the contended one.
func TestDriversRedisServer(t *testing.T) {
	redistest.Need(t)
	all := strings.Join(drivers.Names, ",")
	rep := runJSON(t, "-backend", "redis-server", "-driver", all, "-raw", "-n", "40", "-c", "1,4", "-masters", "3",
		"-rounds", "1", "-node-timeout", "500ms")
	checkDriverRows(t, rep, []string{"single", "redlock", "raw", "single", "redlock", "raw"})
	for _, r := range rep.Results {
		assert.Zero(t, r.Unavailable, "%s %s c=%d", r.Driver, r.Variant, r.Concurrency)
	}

	rep = runJSON(t, "-backend", "redis-server", "-scenario", "contended", "-driver", all, "-n", "16", "-c", "2",
		"-hold", "1ms", "-masters", "3", "-rounds", "1", "-node-timeout", "500ms")
	checkDriverRows(t, rep, []string{"single", "redlock", "redlock fair", "redlock poll"})
	assert.True(t, slices.ContainsFunc(rep.Results, func(r report.Row) bool { return r.Driver == "rueidis" && r.Variant == "redlock" }))
}
