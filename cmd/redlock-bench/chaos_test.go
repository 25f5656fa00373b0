package main

import (
	"encoding/csv"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/cmd/redlock-bench/internal/chaos"
	"quorumlock.dev/internal/harness/redistest"
)

func TestChaosBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-scenario", "no-such"},
		{"-o", "xml"},
		{"-store", "oracle"},
		{"-pg-dsn", "postgres://x"},
		{"-mysql-dsn", "u@tcp(127.0.0.1:1)/x"},
		{"-sqlite-file", "x.db"},
		{"-store", "mysql", "-mysql-dsn", "no slash"},
		{"-workers", "1"},
		{"extra"},
	} {
		code, _, errOut := runCmd(t, append([]string{"chaos"}, args...)...)
		assert.Equal(t, exitUsage, code, "%v: %s", args, errOut)
	}
	code, _, errOut := runCmd(t, "chaos", "-h")
	assert.Equal(t, exitOK, code)
	for _, name := range chaos.Names() {
		assert.Contains(t, errOut, name, "the usage lists every scenario")
	}
}

// TestChaosCommand runs one scenario as a user would, in JSON and in CSV: the columns the
// issue names are there, and the row held.
func TestChaosCommand(t *testing.T) {
	redistest.Need(t)
	code, out, errOut := runCmd(t, "chaos", "-quick", "-scenario", "holder-kill", "-o", "json")
	require.Equal(t, exitOK, code, errOut)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 1)
	for _, col := range []string{"scenario", "runs", "acquisitions", "lock_overlaps", "fenced_duplicates", "lost_writes",
		"stale_writes_rejected", "unavailable", "recovery_ms", "fault_injected"} {
		assert.Contains(t, rows[0], col)
	}
	assert.Equal(t, "holder-kill", rows[0]["scenario"])
	assert.Equal(t, true, rows[0]["held"])
	assert.Equal(t, true, rows[0]["fault_injected"])
}

func TestChaosCSVAndText(t *testing.T) {
	rows := []chaos.Row{{Scenario: "holder-pause", Variant: "redis-server", Runs: 1, Held: false, Problems: "1 fenced duplicates"}}
	var b strings.Builder
	require.NoError(t, writeChaos(&b, rows, "csv"))
	recs, err := csv.NewReader(strings.NewReader(b.String())).ReadAll()
	require.NoError(t, err)
	require.Len(t, recs, 2)
	assert.Equal(t, reflect.TypeFor[chaos.Row]().NumField(), len(recs[0]))
	assert.Equal(t, "scenario", recs[0][0])
	assert.Equal(t, "holder-pause", recs[1][0])

	b.Reset()
	require.NoError(t, writeChaos(&b, rows, "text"))
	assert.Contains(t, b.String(), "holder-pause: 1 fenced duplicates", "a failed row says why")
}

// TestChaosDocListsColumns: docs/chaos.md explains every column of the JSON and CSV output.
func TestChaosDocListsColumns(t *testing.T) {
	doc, err := os.ReadFile("../../docs/chaos.md")
	require.NoError(t, err)
	for f := range reflect.TypeFor[chaos.Row]().Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		assert.Contains(t, string(doc), "`"+name+"`", "docs/chaos.md does not explain column %s", name)
	}
}
