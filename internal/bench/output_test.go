package bench_test

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/internal/bench"
)

// realisticReport looks like a healthy run at two concurrencies plus the
// slow and dead variants, with latencies in the shapes the runner produces.
func realisticReport() *bench.Report {
	row := func(mode string, masters, c int, p50 float64) bench.Row {
		return bench.Row{
			Mode: mode, Masters: masters, Scenario: "healthy", Concurrency: c, Keys: 10000,
			Attempts: 41873, Cycles: 41870, Seconds: 2.000731, OpsPerSec: 20927.84,
			AcquireP50Us: p50, AcquireP90Us: p50 * 1.61, AcquireP99Us: p50 * 3.7,
			AcquireP999Us: p50 * 11.3, AcquireMaxUs: p50 * 42.1, CycleP50Us: p50 * 1.9,
			Acquired: 41870, Contended: 2, Unavailable: 0, Errors: 1,
			AllocsPerOp: 61.37, CPUSeconds: 3.4172,
		}
	}
	single1 := row("single", 1, 1, 38.4)
	redlock1 := row("redlock", 5, 1, 131.2)
	redlock1.RatioOf, redlock1.RatioP50 = "single", 131.2/38.4
	single8 := row("single", 1, 8, 97.25)
	redlock8 := row("redlock", 5, 8, 412.125)
	redlock8.RatioOf, redlock8.RatioP50 = "single", 412.125/97.25
	slow := row("redlock", 5, 1, 30412.5)
	slow.Scenario, slow.DelayMs, slow.OpsPerSec = "slow", 30, 32.8125
	slow.RatioOf, slow.RatioP50 = "delay_ms=0", 30412.5/131.2
	dead := row("redlock", 5, 1, 171.9)
	dead.Scenario, dead.Dead, dead.Unavailable = "dead", 2, 17
	dead.RatioOf, dead.RatioP50 = "healthy", 0.8175

	return &bench.Report{
		Backend: "redis-server",
		Servers: []bench.ServerInfo{
			{Role: "single", Addr: "127.0.0.1:40100", Version: "7.2.4"},
			{Role: "master", Addr: "127.0.0.1:40101", Version: "7.2.4"},
			{Role: "master", Addr: "127.0.0.1:40102", Version: "7.2.5"},
			{Role: "fence", Addr: "127.0.0.1:40106", Version: "7.4.1"},
		},
		Started:    time.Date(2025, 3, 14, 15, 9, 26, 535897000, time.UTC),
		Elapsed:    24.318,
		GoMaxProcs: 8,
		Config: bench.ConfigEcho{
			Scenario: "healthy", Masters: 5, TTLms: 10000, NodeTimeout: 50, Keys: 10000,
			Rounds: 4, DurationS: 2,
		},
		Results: []bench.Row{single1, redlock1, single8, redlock8, slow, dead},
	}
}

func TestWriteText(t *testing.T) {
	rep := realisticReport()
	var out bytes.Buffer
	require.NoError(t, bench.Write(&out, rep, "text"))
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

func TestWriteTextEmpty(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, bench.Write(&out, &bench.Report{Backend: "embedded"}, "text"))
	assert.Contains(t, out.String(), "embedded")
}

func TestWriteJSONRoundTrip(t *testing.T) {
	rep := realisticReport()
	var out bytes.Buffer
	require.NoError(t, bench.Write(&out, rep, "json"))
	assert.Contains(t, out.String(), `"results": [`)
	assert.Contains(t, out.String(), `"acquire_p999_us":`)

	got, err := bench.ReadJSON(&out)
	require.NoError(t, err)
	assert.Equal(t, rep, got)
}

func TestWriteJSONEmptyResultsIsArray(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, bench.Write(&out, &bench.Report{Backend: "embedded"}, "json"))
	assert.Contains(t, out.String(), `"results": []`)
}

func TestReadJSONRejects(t *testing.T) {
	for name, in := range map[string]string{
		"not json":      "backend: embedded",
		"unknown field": `{"backend": "embedded", "resluts": []}`,
		"wrong type":    `{"backend": "embedded", "gomaxprocs": "8"}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := bench.ReadJSON(strings.NewReader(in))
			require.Error(t, err)
			assert.True(t, strings.HasPrefix(err.Error(), "bench: "), err.Error())
		})
	}
}

func TestWriteCSVRoundTrip(t *testing.T) {
	rep := realisticReport()
	var out bytes.Buffer
	require.NoError(t, bench.Write(&out, rep, "csv"))

	header, _, _ := strings.Cut(out.String(), "\n")
	assert.Equal(t, strings.Join(bench.CSVColumns(), ","), header)
	assert.Equal(t, len(rep.Results)+1, strings.Count(out.String(), "\n"))

	got, err := bench.ReadCSV(&out)
	require.NoError(t, err)
	assert.Equal(t, rep.Results, got)
}

func TestWriteCSVFloats(t *testing.T) {
	rep := &bench.Report{Results: []bench.Row{{Mode: "single", OpsPerSec: 1e21, AcquireP50Us: 0.1, Fence: true}}}
	var out bytes.Buffer
	require.NoError(t, bench.Write(&out, rep, "csv"))
	_, line, _ := strings.Cut(out.String(), "\n")
	assert.Contains(t, line, ",1000000000000000000000,", "no exponent")
	assert.Contains(t, line, ",0.1,", "shortest exact form")
	assert.Contains(t, line, ",true,")
}

func TestCSVColumns(t *testing.T) {
	cols := bench.CSVColumns()
	assert.Len(t, cols, reflect.TypeFor[bench.Row]().NumField())
	for _, want := range []string{
		"mode", "masters", "scenario", "concurrency", "keys", "delay_ms", "ops_per_sec",
		"acquire_p50_us", "acquire_p90_us", "acquire_p99_us", "acquire_p999_us", "acquire_max_us",
		"cycle_p50_us", "acquired", "contended", "unavailable", "errors", "allocs_per_op",
	} {
		assert.Contains(t, cols, want)
	}
	assert.Equal(t, "mode", cols[0], "columns follow field order")

	cols[0] = "changed"
	assert.Equal(t, "mode", bench.CSVColumns()[0], "callers get their own copy")
}

func TestReadCSVRejects(t *testing.T) {
	header := strings.Join(bench.CSVColumns(), ",")
	var good bytes.Buffer
	require.NoError(t, bench.Write(&good, realisticReport(), "csv"))
	_, firstRow, _ := strings.Cut(good.String(), "\n")
	firstRow, _, _ = strings.Cut(firstRow, "\n")
	with := func(column, value string) string {
		fields := strings.Split(firstRow, ",")
		for i, c := range bench.CSVColumns() {
			if c == column {
				fields[i] = value
			}
		}
		return header + "\n" + strings.Join(fields, ",") + "\n"
	}

	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty", "", "empty input"},
		{"renamed column", strings.Replace(header, "ops_per_sec", "ops", 1) + "\n", "does not match"},
		{"missing column", strings.TrimSuffix(header, ",ratio_p50") + "\n", "does not match"},
		{"reordered", strings.Replace(header, "mode,variant", "variant,mode", 1) + "\n", "does not match"},
		{"bad float", with("ops_per_sec", "fast"), `line 2, column ops_per_sec: strconv.ParseFloat: parsing "fast"`},
		{"bad int", with("concurrency", "8.5"), "line 2, column concurrency"},
		{"bad bool", with("fence", "yes"), "line 2, column fence"},
		{"short row", header + "\nsingle,1\n", "wrong number of fields"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := bench.ReadCSV(strings.NewReader(tc.in))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.True(t, strings.HasPrefix(err.Error(), "bench: read csv: "), err.Error())
		})
	}
}

func TestReadCSVHeaderOnly(t *testing.T) {
	rows, err := bench.ReadCSV(strings.NewReader(strings.Join(bench.CSVColumns(), ",") + "\n"))
	require.NoError(t, err)
	assert.Empty(t, rows)
}

func TestWriteUnknownFormat(t *testing.T) {
	var out bytes.Buffer
	err := bench.Write(&out, realisticReport(), "xml")
	require.ErrorIs(t, err, bench.ErrFormat)
	assert.Contains(t, err.Error(), `"xml"`)
	assert.Zero(t, out.Len(), "nothing written before the format is known")
}

type failingWriter struct{}

var errDiskFull = errors.New("disk full")

func (failingWriter) Write([]byte) (int, error) { return 0, errDiskFull }

func TestWriteReportsWriteErrors(t *testing.T) {
	for _, format := range bench.Formats {
		t.Run(format, func(t *testing.T) {
			assert.ErrorIs(t, bench.Write(failingWriter{}, realisticReport(), format), errDiskFull)
		})
	}
}
