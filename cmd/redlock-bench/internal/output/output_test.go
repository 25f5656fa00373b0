package output_test

import (
	"bytes"
	"errors"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/cmd/redlock-bench/internal/output"
	"quorumlock.dev/cmd/redlock-bench/internal/report"
	"quorumlock.dev/cmd/redlock-bench/internal/reporttest"
)

func TestWriteText(t *testing.T) {
	rep := reporttest.Realistic()
	var out bytes.Buffer
	require.NoError(t, output.Write(&out, rep, "text"))
	text := out.String()

	assert.Contains(t, text, rep.Backend)
	for _, s := range rep.Servers {
		assert.Contains(t, text, s.Version)
		assert.Contains(t, text, s.Addr)
	}
	assert.Contains(t, text, "ttl 10s")
	assert.Contains(t, text, "3.42× single", "ratio column of redlock c=1")

	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	head := -1
	for i, l := range lines {
		if strings.Contains(l, "ops/s") {
			head = i
		}
	}
	require.NotEqual(t, -1, head, "no table header in\n%s", text)
	rows := lines[head+1:]
	require.Len(t, rows, len(rep.Results), "one line per row in\n%s", text)
	assert.Contains(t, rows[4], "redlock 5m +30ms")
	assert.Contains(t, rows[4], "30412 ")
	assert.NotContains(t, rows[4], "30412.5", "a 30 ms latency needs no decimals")
	assert.Contains(t, rows[5], "redlock 5m 2 dead")
	assert.Contains(t, rows[0], "38.4")
}

// TestWriteTextContendedSplit: the contended table's split % is split over
// lost rounds, and "-" for a row that lost none.
func TestWriteTextContendedSplit(t *testing.T) {
	rep := &report.Report{Config: report.ConfigEcho{Scenario: "contended"}, Results: []report.Row{
		{Mode: "redlock", Variant: "redlock", Masters: 5, Scenario: "contended", Rounds: 900, LostRounds: 800, SplitRounds: 100, SplitPct: 12.5},
		{Mode: "redlock", Variant: "redlock fair", Masters: 5, Scenario: "contended", Rounds: 300},
	}}
	var out bytes.Buffer
	require.NoError(t, output.Write(&out, rep, "text"))
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	require.GreaterOrEqual(t, len(lines), 3)
	cells := func(line string) []string { return regexp.MustCompile(` {2,}`).Split(line, -1) }
	col := slices.Index(cells(lines[len(lines)-3]), "split %")
	require.NotEqual(t, -1, col, lines[len(lines)-3])
	assert.Equal(t, "12.5", cells(lines[len(lines)-2])[col])
	assert.Equal(t, "-", cells(lines[len(lines)-1])[col])
}

// TestWriteTextFirstError: a row that counted errors says the first one
// below the table; a row without errors says nothing.
func TestWriteTextFirstError(t *testing.T) {
	rep := reporttest.Realistic()
	rep.Results[1].Errors, rep.Results[1].FirstError = 3, "redlock: quorum unavailable"
	var out bytes.Buffer
	require.NoError(t, output.Write(&out, rep, "text"))
	label := report.Labels(rep.Results, false)[1]
	assert.Contains(t, out.String(), "first error of "+label+" c=")
	assert.Contains(t, out.String(), ": redlock: quorum unavailable\n")
	assert.Equal(t, 1, strings.Count(out.String(), "first error of"))
}

// TestWriteTextFirstErrorOneLine: a joined error's lines (errors.Join
// separates them with newlines) stay on the row's one line.
func TestWriteTextFirstErrorOneLine(t *testing.T) {
	rep := reporttest.Realistic()
	joined := errors.Join(errors.New("redlock: quorum unavailable"),
		errors.New("redlock: release on 127.0.0.1:39059: quorum: node did not answer in time"))
	rep.Results[1].Errors, rep.Results[1].FirstError = 3, joined.Error()
	var out bytes.Buffer
	require.NoError(t, output.Write(&out, rep, "text"))
	label := report.Labels(rep.Results, false)[1]
	assert.Contains(t, out.String(), "first error of "+label+" c=1: redlock: quorum unavailable; redlock: release on 127.0.0.1:39059: quorum: node did not answer in time\n")
	for line := range strings.Lines(out.String()) {
		assert.False(t, strings.HasPrefix(line, "redlock:"), "a line of its own: %q", line)
	}
}

// TestWriteTextEmbeddedStarved: on the embedded backend, rows with errors
// (or a quorum found unavailable with every master alive) get a note that
// the in-process servers were starved, and where real figures come from;
// real servers, and dead masters' expected refusals, get none.
func TestWriteTextEmbeddedStarved(t *testing.T) {
	write := func(rep *report.Report) string {
		var out bytes.Buffer
		require.NoError(t, output.Write(&out, rep, "text"))
		return out.String()
	}
	const note = "note: the embedded backend's servers run in this process"
	embedded := func() *report.Report {
		rep := reporttest.Realistic()
		rep.Backend, rep.ServersInProcess, rep.GoMaxProcs = "embedded", true, 2
		for i := range rep.Results {
			rep.Results[i].Errors = 0
		}
		return rep
	}

	rep := embedded()
	assert.NotContains(t, write(rep), note, "no errors, and the dead row's refusals are expected")

	rep.Results[3].Errors = 312
	text := write(rep)
	assert.Contains(t, text, note)
	assert.Contains(t, text, "GOMAXPROCS=2")
	assert.Contains(t, text, "miss the 50ms node timeout")
	assert.Contains(t, text, "-backend redis-server")

	rep = embedded()
	rep.Results[2].Unavailable = 40
	assert.Contains(t, write(rep), note, "a quorum found unavailable with every master alive")

	rep = reporttest.Realistic() // real servers, with errors
	rep.Results[3].Errors = 312
	assert.NotContains(t, write(rep), note)
}

// TestWriteTextServersInProcess: on the embedded backend the table does not
// pass the process's allocations off as the client's.
func TestWriteTextServersInProcess(t *testing.T) {
	rep := reporttest.Realistic()
	var out bytes.Buffer
	require.NoError(t, output.Write(&out, rep, "text"))
	assert.NotContains(t, out.String(), "in-process servers")
	assert.NotContains(t, out.String(), "client + servers")

	rep.Backend, rep.ServersInProcess = "embedded", true
	out.Reset()
	require.NoError(t, output.Write(&out, rep, "text"))
	assert.Contains(t, out.String(), "allocs/op and CPU s count the in-process servers too")
	assert.Contains(t, out.String(), "allocs/op (client + servers)")
	assert.Contains(t, out.String(), "CPU s (client + servers)")
}

func TestWriteTextEmpty(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, output.Write(&out, &report.Report{Backend: "embedded"}, "text"))
	assert.Contains(t, out.String(), "embedded")
}

func TestWriteJSONRoundTrip(t *testing.T) {
	rep := reporttest.Realistic()
	var out bytes.Buffer
	require.NoError(t, output.Write(&out, rep, "json"))
	assert.Contains(t, out.String(), `"results": [`)
	assert.Contains(t, out.String(), `"acquire_p999_us":`)

	got, err := reporttest.ReadJSON(&out)
	require.NoError(t, err)
	assert.Equal(t, rep, got)
}

func TestWriteJSONEmptyResultsIsArray(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, output.Write(&out, &report.Report{Backend: "embedded"}, "json"))
	assert.Contains(t, out.String(), `"results": []`)
}

func TestWriteCSVRoundTrip(t *testing.T) {
	rep := reporttest.Realistic()
	var out bytes.Buffer
	require.NoError(t, output.Write(&out, rep, "csv"))

	header, _, _ := strings.Cut(out.String(), "\n")
	assert.Equal(t, strings.Join(output.CSVColumns(), ","), header)
	assert.Equal(t, len(rep.Results)+1, strings.Count(out.String(), "\n"))

	got, err := reporttest.ReadCSV(&out)
	require.NoError(t, err)
	assert.Equal(t, rep.Results, got)
}

func TestWriteCSVFloats(t *testing.T) {
	rep := &report.Report{Results: []report.Row{{Mode: "single", OpsPerSec: 1e21, AcquireP50Us: 0.1, Fence: true}}}
	var out bytes.Buffer
	require.NoError(t, output.Write(&out, rep, "csv"))
	_, line, _ := strings.Cut(out.String(), "\n")
	assert.Contains(t, line, ",1000000000000000000000,", "no exponent")
	assert.Contains(t, line, ",0.1,", "shortest exact form")
	assert.Contains(t, line, ",true,")
}

func TestCSVColumns(t *testing.T) {
	cols := output.CSVColumns()
	assert.Len(t, cols, reflect.TypeFor[report.Row]().NumField())
	for _, want := range []string{
		"mode", "masters", "scenario", "concurrency", "keys", "delay_ms", "ops_per_sec",
		"acquire_p50_us", "acquire_p90_us", "acquire_p99_us", "acquire_p999_us", "acquire_max_us",
		"cycle_p50_us", "acquired", "contended", "unavailable", "errors", "allocs_per_op",
	} {
		assert.Contains(t, cols, want)
	}
	assert.Equal(t, "mode", cols[0], "columns follow field order")

	cols[0] = "changed"
	assert.Equal(t, "mode", output.CSVColumns()[0], "callers get their own copy")
}

func TestWriteUnknownFormat(t *testing.T) {
	var out bytes.Buffer
	err := output.Write(&out, reporttest.Realistic(), "xml")
	require.ErrorIs(t, err, output.ErrFormat)
	assert.Contains(t, err.Error(), `"xml"`)
	assert.Zero(t, out.Len(), "nothing written before the format is known")
}

type failingWriter struct{}

var errDiskFull = errors.New("disk full")

func (failingWriter) Write([]byte) (int, error) { return 0, errDiskFull }

func TestWriteReportsWriteErrors(t *testing.T) {
	for _, format := range output.Formats {
		t.Run(format, func(t *testing.T) {
			assert.ErrorIs(t, output.Write(failingWriter{}, reporttest.Realistic(), format), errDiskFull)
		})
	}
}

// TestWriteTextNoRatioWithoutAcquisitions: a row that acquired nothing has
// a p50 of failures: it prints no ratio but why, and neither does a row
// whose reference acquired nothing (a c=64 row on a starved machine once
// read "2083.7× single").
func TestWriteTextNoRatioWithoutAcquisitions(t *testing.T) {
	rep := reporttest.Realistic()
	i := slices.IndexFunc(rep.Results, func(r report.Row) bool { return r.RatioOf != "" && r.RatioP50 > 0 })
	require.GreaterOrEqual(t, i, 0)
	rep.Results[i].Acquired, rep.Results[i].RatioP50 = 0, 0
	rep.Results[i].AcquireMaxUs = 987654 // finds the row's line
	var out bytes.Buffer
	require.NoError(t, output.Write(&out, rep, "text"))
	var line string
	for l := range strings.Lines(out.String()) {
		if strings.Contains(l, "987654") {
			line = l
		}
	}
	require.NotEmpty(t, line, out.String())
	assert.True(t, strings.HasSuffix(strings.TrimSpace(line), "- (acquired nothing)"), line)
	assert.NotContains(t, line, "×")

	rep = reporttest.Realistic()
	rep.Results[i].RatioP50 = 0 // its reference acquired nothing
	out.Reset()
	require.NoError(t, output.Write(&out, rep, "text"))
	assert.Contains(t, out.String(), "- ("+rep.Results[i].RatioOf+" acquired nothing)")
}
