package plot_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/cmd/redlock-bench/internal/plot"
	"quorumlock.dev/cmd/redlock-bench/internal/report"
	"quorumlock.dev/cmd/redlock-bench/internal/reporttest"
)

func TestPlotFormats(t *testing.T) {
	for _, tc := range []struct {
		file  string
		magic func([]byte) bool
	}{
		{"latency.svg", func(b []byte) bool {
			return bytes.HasPrefix(b, []byte("<?xml")) || bytes.HasPrefix(b, []byte("<svg"))
		}},
		{"latency.png", func(b []byte) bool { return bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) }},
		{"LATENCY.PNG", func(b []byte) bool { return bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) }},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), tc.file)
			require.NoError(t, plot.Draw(path, reporttest.Realistic()))
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Greater(t, len(b), 1000)
			assert.True(t, tc.magic(b), "starts with %q", b[:min(len(b), 16)])
		})
	}
}

func TestPlotUnknownExtension(t *testing.T) {
	path := filepath.Join(t.TempDir(), "latency.txt")
	require.ErrorIs(t, plot.Draw(path, reporttest.Realistic()), plot.ErrFormat)
	assert.NoFileExists(t, path)
}

func TestPlotNothingToDraw(t *testing.T) {
	noAttempts := reporttest.Realistic()
	for i := range noAttempts.Results {
		noAttempts.Results[i].AcquireP50Us = 0
	}
	for name, rep := range map[string]*report.Report{
		"no rows":     {Backend: "embedded"},
		"no attempts": noAttempts,
		"nil":         nil,
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "latency.svg")
			require.Error(t, plot.Draw(path, rep))
			assert.NoFileExists(t, path)
		})
	}
}

// Rows that measured nothing are left out rather than drawn at the axis
// floor, and a row whose tail reaches past every other still fits.
func TestPlotSkipsEmptyRows(t *testing.T) {
	rep := reporttest.Realistic()
	rep.Results[1] = report.Row{Mode: "redlock", Masters: 5, Scenario: "dead", Dead: 3}
	rep.Results[2].AcquireMaxUs = 5e6
	require.NoError(t, plot.Draw(filepath.Join(t.TempDir(), "latency.svg"), rep))
}

// The scale scenario has the most rows; it must draw without labels
// colliding into an error.
func TestPlotScale(t *testing.T) {
	rep := &report.Report{Backend: "embedded"}
	for _, c := range []int{1, 8, 64} {
		for _, m := range []int{1, 3, 5, 7, 9} {
			p50 := float64(20*m) * float64(c)
			rep.Results = append(rep.Results, report.Row{
				Mode: "redlock", Masters: m, Scenario: "scale", Concurrency: c,
				AcquireP50Us: p50, AcquireP90Us: p50 * 2, AcquireP99Us: p50 * 5, AcquireP999Us: p50 * 9,
			})
		}
	}
	require.NoError(t, plot.Draw(filepath.Join(t.TempDir(), "scale.png"), rep))
}

// TestPlotLabelKey: the key under the chart spells out "Nm" as what the
// rows run on: masters for the benchmark's rows, servers for the options of
// `redlock-bench choose` (etcd's are members).
func TestPlotLabelKey(t *testing.T) {
	draw := func(rep *report.Report) string {
		path := filepath.Join(t.TempDir(), "latency.svg")
		require.NoError(t, plot.Draw(path, rep))
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		return string(b)
	}
	rep := reporttest.Realistic()
	assert.Contains(t, draw(rep), "N masters")
	for i := range rep.Results {
		rep.Results[i].Scenario = "choose"
	}
	svg := draw(rep)
	assert.Contains(t, svg, "N servers")
	assert.NotContains(t, svg, "N masters")
}

// TestPlotDrivers: a per-driver run (-driver, -raw) has the most bars;
// each is labelled with its driver.
func TestPlotDrivers(t *testing.T) {
	rep := &report.Report{Backend: "redis-server"}
	for _, c := range []int{1, 8, 64} {
		for _, mode := range []string{"single", "redlock", "raw"} {
			for _, d := range []string{"go-redis", "go-redis-pipelined", "rueidis", "valkey-go"} {
				p50 := float64(100*c) + float64(len(d))
				rep.Results = append(rep.Results, report.Row{
					Mode: mode, Variant: mode, Masters: 5, Scenario: "healthy", Concurrency: c, Driver: d,
					AcquireP50Us: p50, AcquireP90Us: p50 * 2, AcquireP99Us: p50 * 5, AcquireP999Us: p50 * 9,
				})
			}
		}
	}
	path := filepath.Join(t.TempDir(), "drivers.svg")
	require.NoError(t, plot.Draw(path, rep))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	for _, want := range []string{"go-redis-pipelined raw 5m", "valkey-go redlock 5m", "rueidis single"} {
		assert.Contains(t, string(b), want)
	}
}
