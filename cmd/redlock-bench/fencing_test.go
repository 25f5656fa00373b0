package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/cmd/redlock-bench/internal/allocjobs"
	"quorumlock.dev/cmd/redlock-bench/internal/fencingbench"
	"quorumlock.dev/internal/harness/mariadbserver/mariadbtest"
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
		"-node-timeout", "100ms", "-pause", "700ms", "-pause-rate", "0.01", "-cost-samples", "50", "-o", "json")
	require.Equal(t, exitOK, code, errOut)
	rep := readFencing(t, out)
	assert.Equal(t, "memory", rep.Storage)
	assertProof(t, rep, 3000)

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
		{"fencing", "-store", "oracle"},
		{"fencing", "-store", "mysql"}, // no DSN, and no throw-away server on the embedded backend
		{"fencing", "-store", "postgres"},
		{"fencing", "-store", "sqlite", "-pg-dsn", "postgres://u@h/db"},
		{"fencing", "-store", "memory", "-mysql-dsn", "u@tcp(h:3306)/db"},
		{"fencing", "-store", "memory", "-sqlite-file", "x.db"},
		{"fencing", "-mysql-dsn", "no slash"},
		{"fencing", "-cost-samples", "-1"},
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
		"-node-timeout", "100ms", "-pause", "700ms", "-pause-rate", "0.01", "-cost-samples", "50", "-o", "json", "-pg-dsn", dsn)
	require.Equal(t, exitOK, code, errOut)
	rep := readFencing(t, out)
	assert.Equal(t, "postgresql", rep.Storage)
	assert.NotEmpty(t, rep.PGVersion)
	assert.Equal(t, rep.PGVersion, rep.StorageVersion)
	assertProof(t, rep, 1500)

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

// readFencing reads the command's JSON report.
func readFencing(t *testing.T, out string) *fencingbench.Report {
	t.Helper()
	var rep fencingbench.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	return &rep
}

// assertProof checks a small run's report: the same pauses in both passes, duplicates
// without the fence (the failure observed), none with it (prevented), every order shipped,
// and the fence's cost timed beside the unguarded calls.
func assertProof(t *testing.T, rep *fencingbench.Report, jobs int64) {
	t.Helper()
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
		assert.Equal(t, jobs, r.Orders)
		assert.Zero(t, r.Errors, r.FirstError)
	}
	require.NotNil(t, rep.GuardCost)
	assert.Equal(t, 50, rep.GuardCost.Samples)
	for _, l := range []allocjobs.Latency{rep.GuardCost.Claim.Unguarded, rep.GuardCost.Claim.Guarded,
		rep.GuardCost.Write.Unguarded, rep.GuardCost.Write.Guarded} {
		assert.Positive(t, l.P50us)
		assert.GreaterOrEqual(t, l.P99us, l.P50us)
		assert.Positive(t, l.PerSecond)
	}
}

// TestFencingSQLStores: the command with the storage in MariaDB (-mysql-dsn) and in SQLite
// (-sqlite-file), both guarded by sqlfence; the run's tables are dropped afterwards, and a
// password, from the DSN or MYSQL_PWD, is never printed.
func TestFencingSQLStores(t *testing.T) {
	if testing.Short() {
		t.Skip("a load run: skipped with -short")
	}
	// A few hundred jobs: modernc.org/sqlite is C translated to Go, which the race detector
	// slows down many times over; 3% of them pause, a dozen holders.
	args := []string{"fencing", "-jobs", "400", "-skus", "20", "-c", "8", "-ttl", "300ms",
		"-node-timeout", "100ms", "-pause", "700ms", "-pause-rate", "0.03", "-cost-samples", "50", "-o", "json"}
	tables := "SELECT count(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE 'quorumlock_bench_%'"

	t.Run("mysql", func(t *testing.T) {
		dsn := mariadbtest.NewDatabase(t, mariadbtest.Shared(t))
		code, out, errOut := runCmd(t, append(args, "-mysql-dsn", dsn)...)
		require.Equal(t, exitOK, code, errOut)
		rep := readFencing(t, out)
		assert.Equal(t, "mysql", rep.Storage)
		assert.Contains(t, rep.StorageVersion, "MariaDB")
		assertProof(t, rep, 400)
		var n int
		require.NoError(t, mariadbtest.Open(t, dsn).QueryRow(tables).Scan(&n))
		assert.Zero(t, n, "the run's tables are dropped")

		code, _, errOut = runCmd(t, "fencing", "-jobs", "10", "-mysql-dsn", "bench:s3cr3t-pw@tcp(127.0.0.1:1)/x?timeout=2s")
		assert.Equal(t, exitError, code)
		assert.Contains(t, errOut, "MySQL")
		assert.NotContains(t, errOut, "s3cr3t-pw")
		assert.Equal(t, 1, strings.Count(errOut, "\n"), errOut)

		t.Setenv("MYSQL_PWD", "env-s3cr3t")
		code, _, errOut = runCmd(t, "fencing", "-jobs", "10", "-mysql-dsn", "bench@tcp(127.0.0.1:1)/x?timeout=2s")
		assert.Equal(t, exitError, code)
		assert.NotContains(t, errOut, "env-s3cr3t")
	})

	t.Run("sqlite", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "fencing.db")
		code, out, errOut := runCmd(t, append(args, "-sqlite-file", file)...)
		require.Equal(t, exitOK, code, errOut)
		rep := readFencing(t, out)
		assert.Equal(t, "sqlite", rep.Storage)
		assert.NotEmpty(t, rep.StorageVersion)
		assertProof(t, rep, 400)
		db, err := sql.Open("sqlite", fencingbench.SQLiteDSN(file))
		require.NoError(t, err)
		defer db.Close()
		var n int
		require.NoError(t, db.QueryRow("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name LIKE 'quorumlock_bench_%'").Scan(&n))
		assert.Zero(t, n, "the run's tables are dropped")
	})
}
