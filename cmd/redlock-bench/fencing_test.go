package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/cmd/redlock-bench/internal/fencingbench"
	"quorumlock.dev/internal/harness/pgtest"
)

// TestFencingCommand: `redlock-bench fencing` shows the incident review's result on a
// small run: duplicates without the fence, none with it.
func TestFencingCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("a load run: skipped with -short")
	}
	// Node timeouts with room for the race detector's slowdown (5-10×):
	// with 10 ms, every call missed it and the run never finished.
	code, out, errOut := runCmd(t, "fencing", "-jobs", "3000", "-skus", "40", "-c", "16", "-ttl", "300ms",
		"-node-timeout", "100ms", "-pause", "700ms", "-pause-rate", "0.01", "-o", "json")
	require.Equal(t, exitOK, code, errOut)
	var rep fencingbench.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Len(t, rep.Results, 2)
	unfenced, fenced := rep.Results[0], rep.Results[1]
	assert.Equal(t, "unfenced", unfenced.Mode)
	assert.Equal(t, "fenced", fenced.Mode)
	assert.Equal(t, unfenced.Pauses, fenced.Pauses, "both passes pause the same jobs")
	assert.Positive(t, unfenced.Pauses)
	assert.Positive(t, unfenced.Duplicates, "without the fence, paused holders ship twice")
	assert.Zero(t, fenced.Duplicates, "with the fence, no order ships twice")
	assert.Positive(t, fenced.Rejections)
	for _, r := range rep.Results {
		assert.Equal(t, int64(3000), r.Orders)
		assert.Zero(t, r.Errors, r.FirstError)
	}

	code, out, _ = runCmd(t, "fencing", "-jobs", "500", "-c", "8", "-node-timeout", "100ms", "-ttl", "300ms", "-pause-rate", "0")
	require.Equal(t, exitOK, code)
	assert.Contains(t, out, "duplicates")
}

// TestFencingTellsProgress: a pass says on stderr when it starts and ends
// (and, on a terminal, draws a bar), and the embedded backend's counter is
// not asked for CONFIG, which miniredis does not know: no "unknown command"
// in the report.
func TestFencingTellsProgress(t *testing.T) {
	code, out, errOut := runCmd(t, "fencing", "-jobs", "300", "-skus", "40", "-c", "8", "-ttl", "300ms",
		"-node-timeout", "100ms", "-pause-rate", "0")
	require.Equal(t, exitOK, code, errOut)
	for _, mode := range []string{"unfenced", "fenced"} {
		assert.Contains(t, errOut, "fencing: "+mode+" pass: 300 jobs\n")
		assert.Contains(t, errOut, "fencing: "+mode+" pass done in ")
	}
	assert.Less(t, strings.Index(errOut, "unfenced pass done"), strings.Index(errOut, "fencing: fenced pass: 300"), errOut)
	assert.Contains(t, out, "fence counter durability: not checked: the embedded backend")
	assert.Contains(t, out, "storage: memory, started", "no PostgreSQL version, no stray space")
	for _, s := range []string{out, errOut} {
		assert.NotContains(t, s, "CONFIG GET")
		assert.NotContains(t, s, "unknown command")
	}
}

func TestFencingBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"fencing", "-jobs", "0"},
		{"fencing", "-pause", "10ms", "-ttl", "100ms"},
		{"fencing", "-pause-rate", "1.5"},
		{"fencing", "-o", "csv"},
		{"fencing", "-backend", "cloud"},
		{"fencing", "-node-timeout", "200ms"},
		{"fencing", "extra"},
	} {
		code, _, errOut := runCmd(t, args...)
		assert.Equal(t, exitUsage, code, args)
		assert.Contains(t, errOut, "usage: redlock-bench fencing", args)
	}
}

// TestFencingPostgres: the same command with the storage in PostgreSQL
// (-pg-dsn); its tables are dropped afterwards.
func TestFencingPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("a load run: skipped with -short")
	}
	srv := pgtest.Start(t)
	dsn := srv.DSN("postgres")
	code, out, errOut := runCmd(t, "fencing", "-jobs", "1500", "-skus", "40", "-c", "16", "-ttl", "300ms",
		"-node-timeout", "100ms", "-pause", "700ms", "-pause-rate", "0.01", "-o", "json", "-pg-dsn", dsn)
	require.Equal(t, exitOK, code, errOut)
	var rep fencingbench.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	assert.Equal(t, "postgresql", rep.Storage)
	assert.NotEmpty(t, rep.PGVersion)
	require.Len(t, rep.Results, 2)
	assert.Positive(t, rep.Results[0].Duplicates)
	assert.Zero(t, rep.Results[1].Duplicates)
	assert.Positive(t, rep.Results[1].Rejections)

	pool := pgtest.Pool(t, dsn)
	var tables int
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_tables WHERE tablename LIKE 'quorumlock_bench_%'`).Scan(&tables))
	assert.Zero(t, tables, "the run's tables are dropped")

	code, _, errOut = runCmd(t, "fencing", "-jobs", "10", "-pg-dsn", "postgres://nobody@127.0.0.1:1/x?connect_timeout=2")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "PostgreSQL")
	assert.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
}
