package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/cmd/redlock-bench/internal/choose"
)

// TestChooseCommand: `redlock-bench choose -o json` on small sizes prints a row per option
// and concurrency with every cell measured, and draws the plot. Under CI=true a missing
// server fails it (-require); elsewhere the options that ran are checked.
func TestChooseCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("starts every option's servers: skipped with -short")
	}
	svg := filepath.Join(t.TempDir(), "choose.svg")
	args := []string{"choose", "-c", "1,2", "-d", "150ms", "-keys", "50", "-ttl", "2s",
		"-node-timeout", "200ms", "-lease", "500ms", "-o", "json", "-plot", svg}
	if os.Getenv("CI") == "true" {
		args = append(args, "-require")
	}
	// The run's own bound: a server that cannot start or answer must not hang the suite.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	code := run(ctx, args, &out, &errOut)
	require.Equal(t, exitOK, code, errOut.String())
	var rep choose.Report
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
	ran := map[string]int{}
	for _, r := range rep.Results {
		ran[r.Option]++
		assert.Positive(t, r.Cycles, r.Option)
		assert.Positive(t, r.AcquireP50Us, r.Option)
		assert.NotEmpty(t, r.Fence, r.Option)
		assert.NotEmpty(t, r.AfterFailover, r.Option)
		assert.Equal(t, r.Option == "single-redis", r.StaleWriteAccepted, "%s: %s", r.Option, r.StaleWrite)
	}
	for _, s := range rep.Skipped {
		assert.Contains(t, errOut.String(), "choose: "+s.Option+" skipped: ")
	}
	assert.Len(t, ran, len(choose.Options)-len(rep.Skipped))
	for name, n := range ran {
		assert.Equal(t, 2, n, name)
	}
	fi, err := os.Stat(svg)
	require.NoError(t, err)
	assert.Positive(t, fi.Size())
}

func TestChooseBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"choose", "-options", "zookeeper"},
		{"choose", "-c", "0"},
		{"choose", "-c", "x"},
		{"choose", "-backend", "cloud"},
		{"choose", "-o", "yaml"},
		{"choose", "-plot", "out.pdf"},
		{"choose", "-ttl", "500ms"},
		{"choose", "-lease", "20ms"},
		{"choose", "-d", "0"},
		{"choose", "extra"},
	} {
		code, out, errOut := runCmd(t, args...)
		assert.Equal(t, exitUsage, code, args)
		assert.Empty(t, out, args)
		assert.Contains(t, errOut, "usage: redlock-bench choose", args)
	}
	code, _, errOut := runCmd(t, "choose", "-h")
	assert.Equal(t, exitOK, code)
	assert.True(t, strings.Contains(errOut, "-options"), errOut)
}
