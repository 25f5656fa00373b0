package docfigures

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/cmd/redlock-bench/internal/report"
)

// root is the repository's root, from this package's directory.
const root = "../../../.."

// table is a Markdown table and the last line of text before it, which names the JSON file the
// table comes from, if any.
type table struct {
	line    int // of the header, from 1
	caption string
	header  []string
	rows    [][]string
}

// tables returns the tables of a Markdown document.
func tables(md string) []table {
	var out []table
	var caption string
	var cur *table
	for i, l := range strings.Split(md, "\n") {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "|") {
			cur = nil
			if l != "" {
				caption = l
			}
			continue
		}
		cells := strings.Split(strings.Trim(l, "|"), "|")
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		switch {
		case cur == nil:
			out = append(out, table{line: i + 1, caption: caption, header: cells})
			cur = &out[len(out)-1]
		case strings.Trim(l, "|-: ") == "":
			// the alignment row
		default:
			cur.rows = append(cur.rows, cells)
		}
	}
	return out
}

// cell returns row's cell under the header column named name.
func (t table) cell(tt *testing.T, row []string, name string) string {
	tt.Helper()
	for i, h := range t.header {
		if h == name {
			require.Less(tt, i, len(row), "line %d: a row is shorter than the header", t.line)
			return row[i]
		}
	}
	tt.Fatalf("table at line %d has no column %q: %v", t.line, name, t.header)
	return ""
}

var jsonName = regexp.MustCompile(`([a-z0-9-]+\.json)`)

// versionNumber is the leading x.y.z of a server's version string.
var versionNumber = regexp.MustCompile(`^[0-9]+(\.[0-9]+)+`)

// source is the JSON file a caption names ("" for none).
func source(caption string) string {
	m := jsonName.FindStringSubmatch(caption)
	if m == nil {
		return ""
	}
	return m[1]
}

func readDoc(t *testing.T, name string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "docs", name))
	require.NoError(t, err)
	return string(raw)
}

func readJSON(t *testing.T, name string, v any) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "docs", "bench", name))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, v), name)
}

func benchRun(t *testing.T, name string) *report.Report {
	t.Helper()
	var r report.Report
	readJSON(t, name, &r)
	require.NotEmpty(t, r.Results, name)
	return &r
}

// prose is md with every run of white space made one space, so that a figure is found whatever
// the line breaks around it.
func prose(md string) string { return strings.Join(strings.Fields(md), " ") }

// f0 rounds to a whole number, as the docs print most figures.
func f0(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }

// thousands prints n with commas: 1,000,000.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// hundreds prints v rounded to hundreds, with commas: 11,400.
func hundreds(v float64) string { return thousands(int64(math.Round(v/100) * 100)) }

// word spells n as the docs' text does, from zero to ten.
func word(n int) string {
	words := []string{"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"}
	if n < 0 || n >= len(words) {
		return strconv.Itoa(n)
	}
	return words[n]
}

// series prints ns as a list in prose: "1, 8 and 64".
func series(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// row finds the result of variant at concurrency c.
func row(t *testing.T, r *report.Report, variant string, c int) report.Row {
	t.Helper()
	for _, x := range r.Results {
		if x.Variant == variant && x.Concurrency == c {
			return x
		}
	}
	t.Fatalf("no result %q at c=%d", variant, c)
	return report.Row{}
}

// TestBenchmarkTables: every table of docs/benchmarks.md that names a JSON file shows that
// file's rows, each figure as the JSON has it, rounded as printed, and no row more or less.
func TestBenchmarkTables(t *testing.T) {
	md := readDoc(t, "benchmarks.md")
	checked := 0
	for _, tb := range tables(md) {
		name := source(tb.caption)
		if name == "" {
			continue
		}
		checked++
		r := benchRun(t, name)
		switch tb.header[0] {
		case "variant": // the CLI's uncontended tables
			assert.Len(t, tb.rows, len(r.Results), "line %d: one row per result of %s", tb.line, name)
			for _, cells := range tb.rows {
				c, err := strconv.Atoi(tb.cell(t, cells, "c"))
				require.NoError(t, err)
				x := row(t, r, tb.cell(t, cells, "variant"), c)
				ratio := ""
				if x.RatioOf != "" {
					ratio = fmt.Sprintf("%.2f× %s", x.RatioP50, x.RatioOf)
				}
				want := map[string]string{
					"masters": strconv.Itoa(x.Masters), "cycles/s": f0(x.OpsPerSec),
					"p50 µs": f0(x.AcquireP50Us), "p90": f0(x.AcquireP90Us), "p99": f0(x.AcquireP99Us),
					"p99.9": f0(x.AcquireP999Us), "max": f0(x.AcquireMaxUs), "cycle p50": f0(x.CycleP50Us),
					"acquired": strconv.FormatInt(x.Acquired, 10), "contended": strconv.FormatInt(x.Contended, 10),
					"unavailable": strconv.FormatInt(x.Unavailable, 10), "errors": strconv.FormatInt(x.Errors, 10),
					"allocs/op": f0(x.AllocsPerOp), "ratio": ratio,
				}
				for col, v := range want {
					assert.Equal(t, v, tb.cell(t, cells, col), "line %d, %s c=%d, %s (%s)", tb.line, x.Variant, c, col, name)
				}
			}
		case "run": // the contended runs: run 1 is the JSON
			ones := 0
			for _, cells := range tb.rows {
				if tb.cell(t, cells, "run") != "1" {
					continue
				}
				ones++
				x := row(t, r, tb.cell(t, cells, "variant"), 8)
				waitMs := x.WaitP99Us / 1000
				wait := f0(waitMs)
				if waitMs < 100 {
					wait = strconv.FormatFloat(waitMs, 'f', 1, 64)
				}
				want := map[string]string{
					"sections/s": f0(x.SectionsPerSec), "wait p99 ms": wait,
					"handoff p50 µs": f0(x.HandoffP50Us), "handoff p99 µs": f0(x.HandoffP99Us),
					"fairness": strconv.FormatFloat(x.Fairness, 'f', 2, 64), "violations": strconv.FormatInt(x.Violations, 10),
					"allocs/op": f0(x.AllocsPerOp),
				}
				for col, v := range want {
					assert.Equal(t, v, tb.cell(t, cells, col), "line %d, run 1 %s, %s (%s)", tb.line, x.Variant, col, name)
				}
			}
			assert.Positive(t, ones, "line %d: no row of run 1, the run %s holds", tb.line, name)
		default:
			t.Errorf("line %d: a table from %s that this test has no rule for: %v", tb.line, name, tb.header)
		}
	}
	assert.GreaterOrEqual(t, checked, 6, "tables naming their JSON file: healthy, slow, dead2, dead3, scale, contended")
}

// TestBenchmarkProse: the figures the text of docs/benchmarks.md derives from the JSON files.
func TestBenchmarkProse(t *testing.T) {
	text := prose(readDoc(t, "benchmarks.md"))
	healthy, slow, dead2, dead3, scale, contended :=
		benchRun(t, "healthy.json"), benchRun(t, "slow.json"), benchRun(t, "dead2.json"),
		benchRun(t, "dead3.json"), benchRun(t, "scale.json"), benchRun(t, "contended.json")
	has := func(want string) {
		t.Helper()
		assert.Contains(t, text, want)
	}
	ratio := func(r *report.Report, variant string, c int) string {
		return fmt.Sprintf("%.2f×", row(t, r, variant, c).RatioP50)
	}

	// The client's CPU and allocations per cycle in the scale run, at c=1.
	cpu := func(masters int) float64 {
		x := row(t, scale, "masters="+strconv.Itoa(masters), 1)
		return x.CPUSeconds / float64(x.Cycles) * 1e6
	}
	allocs := func(masters int) float64 { return row(t, scale, "masters="+strconv.Itoa(masters), 1).AllocsPerOp }
	cpuPerMaster := f0((cpu(9) - cpu(1)) / 8)
	has(fmt.Sprintf("about %s µs of CPU per master", cpuPerMaster))
	has(fmt.Sprintf("%s µs with one master, %s µs with three, %s µs with nine", f0(cpu(1)), f0(cpu(3)), f0(cpu(9))))
	has(fmt.Sprintf("an acquire p50 of %s µs at three masters, %s µs at nine",
		f0(row(t, scale, "masters=3", 1).AcquireP50Us), f0(row(t, scale, "masters=9", 1).AcquireP50Us)))
	has(fmt.Sprintf("CPU per lock (about %s µs per master here)", cpuPerMaster))
	has(fmt.Sprintf("allocations (about %s per master: %s per cycle with one master, %s with nine)",
		f0((allocs(9)-allocs(1))/8), f0(allocs(1)), f0(allocs(9))))

	// The single-instance mode under load.
	s8, s64 := row(t, healthy, "single", 8), row(t, healthy, "single", 64)
	r8, r64 := row(t, healthy, "redlock", 8), row(t, healthy, "redlock", 64)
	has(fmt.Sprintf("single-instance mode runs %s and %s cycles/s against %s and %s for five masters",
		thousands(int64(math.Round(s8.OpsPerSec))), thousands(int64(math.Round(s64.OpsPerSec))),
		thousands(int64(math.Round(r8.OpsPerSec))), thousands(int64(math.Round(r64.OpsPerSec)))))
	has(fmt.Sprintf("(%.1f× and %.1f×)", s8.OpsPerSec/r8.OpsPerSec, s64.OpsPerSec/r64.OpsPerSec))
	has(fmt.Sprintf("about %s single-instance cycles/s at c=1", hundreds(row(t, healthy, "single", 1).OpsPerSec)))

	// Against the targets.
	has(ratio(healthy, "redlock", 1) + " in the published run")
	has(fmt.Sprintf("%s (c=1), %s (c=8) | met", ratio(slow, "delay_ms=30", 1), ratio(slow, "delay_ms=30", 8)))
	has(fmt.Sprintf("%s (c=1), %s (c=8);", ratio(dead2, "dead=2", 1), ratio(dead2, "dead=2", 8)))
	d3 := row(t, dead3, "dead=3", 1)
	has(fmt.Sprintf("p50 %.1f ms, p99 %.1f ms, max %.1f ms", d3.AcquireP50Us/1000, d3.AcquireP99Us/1000, d3.AcquireMaxUs/1000))
	has(fmt.Sprintf("%s at c=1, %s at c=8", ratio(scale, "masters=9", 1), ratio(scale, "masters=9", 8)))
	has(fmt.Sprintf("(%s allocations per cycle with two dead, against %s healthy",
		f0(row(t, dead2, "dead=2", 1).AllocsPerOp), f0(row(t, dead2, "healthy", 1).AllocsPerOp)))

	// The contended runs: run 1 is contended.json.
	fair, poll := row(t, contended, "redlock fair", 8), row(t, contended, "redlock poll", 8)
	has(fmt.Sprintf("the fair client used %.2f s of CPU against %.2f s for the polling one", fair.CPUSeconds, poll.CPUSeconds))
	m := regexp.MustCompile("`single` and `redlock` were (\\d+)-(\\d+) and (\\d+)-(\\d+) sections/s in the same runs, wait p99 (\\d+)-(\\d+) ms").FindStringSubmatch(text)
	require.NotNil(t, m, "the sentence on single and redlock in the contended runs")
	within := func(what string, v float64, lo, hi string) {
		t.Helper()
		l, _ := strconv.ParseFloat(lo, 64)
		h, _ := strconv.ParseFloat(hi, 64)
		assert.True(t, math.Round(v) >= l && math.Round(v) <= h, "%s: run 1's %.1f is outside the quoted %s-%s", what, v, lo, hi)
	}
	single, redlock := row(t, contended, "single", 8), row(t, contended, "redlock", 8)
	within("single sections/s", single.SectionsPerSec, m[1], m[2])
	within("redlock sections/s", redlock.SectionsPerSec, m[3], m[4])
	within("single wait p99 ms", single.WaitP99Us/1000, m[5], m[6])
	within("redlock wait p99 ms", redlock.WaitP99Us/1000, m[5], m[6])
}

// chaosRow is what the docs quote of a row of `redlock-bench chaos -o json`.
type chaosRow struct {
	Scenario            string  `json:"scenario"`
	Variant             string  `json:"variant"`
	Runs                int     `json:"runs"`
	Acquisitions        int     `json:"acquisitions"`
	LockOverlaps        int     `json:"lock_overlaps"`
	StaleWrites         int     `json:"stale_writes"`
	StaleWritesRejected int     `json:"stale_writes_rejected"`
	FencedDuplicates    int     `json:"fenced_duplicates"`
	UnfencedDuplicates  int     `json:"unfenced_duplicates"`
	LostWrites          int     `json:"lost_writes"`
	Unavailable         int     `json:"unavailable"`
	UnavailableP99Ms    float64 `json:"unavailable_p99_ms"`
	FenceUnavailable    int     `json:"fence_unavailable"`
	AcquireP50Ms        float64 `json:"acquire_p50_ms"`
	HealthyP50Ms        float64 `json:"healthy_p50_ms"`
	RecoveryMs          float64 `json:"recovery_ms"`
	PeakGoroutines      int     `json:"peak_goroutines"`
	FaultInjected       bool    `json:"fault_injected"`
	Held                bool    `json:"held"`
}

// TestChaosTable: docs/chaos.md's results table is chaos.json's rows, and the guarded row
// chaos-restart-guard.json's, as the text says; with the figures the text quotes of them.
func TestChaosTable(t *testing.T) {
	md := readDoc(t, "chaos.md")
	var main, guard []chaosRow
	readJSON(t, "chaos.json", &main)
	readJSON(t, "chaos-restart-guard.json", &guard)
	find := func(rows []chaosRow, scenario string) (chaosRow, bool) {
		for _, r := range rows {
			if r.Scenario == scenario {
				return r, true
			}
		}
		return chaosRow{}, false
	}
	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	var results *table
	for _, tb := range tables(md) {
		if source(tb.caption) == "chaos.json" {
			results = &tb
		}
	}
	require.NotNil(t, results, "the results table, after the line naming bench/chaos.json")
	seen := map[string]bool{}
	for _, cells := range results.rows {
		scenario := results.cell(t, cells, "scenario")
		seen[scenario] = true
		r, ok := find(main, scenario)
		from := "chaos.json"
		if !ok {
			r, ok = find(guard, scenario)
			from = "chaos-restart-guard.json"
		}
		require.True(t, ok, "line %d: %s is in neither JSON file", results.line, scenario)
		want := map[string]string{
			"variant": r.Variant, "runs": strconv.Itoa(r.Runs), "locks": strconv.Itoa(r.Acquisitions),
			"overlaps":                strconv.Itoa(r.LockOverlaps),
			"stale writes (rejected)": fmt.Sprintf("%d (%d)", r.StaleWrites, r.StaleWritesRejected),
			"fenced dup":              strconv.Itoa(r.FencedDuplicates), "unfenced dup": strconv.Itoa(r.UnfencedDuplicates),
			"lost":                   strconv.Itoa(r.LostWrites),
			"unavailable (p99 ms)":   fmt.Sprintf("%d (%.1f)", r.Unavailable, r.UnavailableP99Ms),
			"fence unavailable":      strconv.Itoa(r.FenceUnavailable),
			"p50 ms during / before": fmt.Sprintf("%.2f / %.2f", r.AcquireP50Ms, r.HealthyP50Ms),
			"recovery ms":            f0(r.RecoveryMs), "peak goroutines": strconv.Itoa(r.PeakGoroutines),
			"fault verified": yes(r.FaultInjected), "held": yes(r.Held),
		}
		for col, v := range want {
			assert.Equal(t, v, results.cell(t, cells, col), "line %d, %s, %s (%s)", results.line, scenario, col, from)
		}
	}
	for _, r := range main {
		assert.True(t, seen[r.Scenario], "chaos.json's %s is not in the table", r.Scenario)
	}

	text := prose(md)
	unguarded, _ := find(guard, "restart-no-persistence")
	guarded, _ := find(guard, "restart-no-persistence-guarded")
	assert.Contains(t, text, fmt.Sprintf("over its %d runs, %d locks, %d overlaps, %d stale writes all rejected, %d unfenced duplicates, recovery %s ms",
		unguarded.Runs, unguarded.Acquisitions, unguarded.LockOverlaps, unguarded.StaleWrites, unguarded.UnfencedDuplicates, f0(unguarded.RecoveryMs)))
	assert.Equal(t, unguarded.StaleWrites, unguarded.StaleWritesRejected, "the text says all were rejected")
	assert.Contains(t, text, fmt.Sprintf("(%s refusals, p99 %s ms)", thousands(int64(guarded.Unavailable)), f0(guarded.UnavailableP99Ms)))
	assert.Contains(t, text, fmt.Sprintf("%.1f s from the restart to the next lock", guarded.RecoveryMs/1000))
	// "5 stale writes and 5 duplicates in the unfenced twin over its 5 runs", for each row
	// where the lock alone fails.
	for _, s := range []string{"holder-pause", "restart-no-persistence", "master-clock-jump", "failover"} {
		r, ok := find(main, s)
		require.True(t, ok, s)
		assert.Contains(t, text, fmt.Sprintf("each of those rows counts %d stale writes and %d duplicates in the unfenced twin over its %d runs",
			r.StaleWrites, r.UnfencedDuplicates, r.Runs), s)
	}
}

// TestFencingTables: docs/fencing.md's duplicate-write tables are their JSON files' passes.
func TestFencingTables(t *testing.T) {
	md := readDoc(t, "fencing.md")
	type pass struct {
		Mode        string  `json:"mode"`
		Jobs        int64   `json:"jobs"`
		Pauses      int64   `json:"pauses"`
		Shipments   int64   `json:"shipments"`
		Duplicates  int64   `json:"duplicates"`
		Rejections  int64   `json:"rejections"`
		WallSeconds float64 `json:"wall_s"`
	}
	checked := 0
	for _, tb := range tables(md) {
		name := source(tb.caption)
		if name == "" || len(tb.header) > 0 && tb.header[0] == "store (guard)" {
			continue // the stores' table is checked below
		}
		checked++
		var run struct{ Results []pass }
		readJSON(t, name, &run)
		assert.Len(t, tb.rows, len(run.Results), "line %d: one row per pass of %s", tb.line, name)
		for _, cells := range tb.rows {
			var p pass
			for _, x := range run.Results {
				if x.Mode == tb.cell(t, cells, "mode") {
					p = x
				}
			}
			require.NotEmpty(t, p.Mode, "line %d: no pass %q in %s", tb.line, tb.cell(t, cells, "mode"), name)
			dup := "**" + thousands(p.Duplicates) + "**"
			if p.Duplicates > 0 {
				dup += fmt.Sprintf(" (%.2f%%)", 100*float64(p.Duplicates)/float64(p.Jobs))
			}
			want := map[string]string{
				"jobs": thousands(p.Jobs), "holders paused": thousands(p.Pauses), "shipments": thousands(p.Shipments),
				"duplicate shipments": dup, "rejected writes": thousands(p.Rejections), "wall": f0(p.WallSeconds) + " s",
			}
			for col, v := range want {
				assert.Equal(t, v, tb.cell(t, cells, col), "line %d, %s, %s (%s)", tb.line, p.Mode, col, name)
			}
		}
	}
	assert.Equal(t, 1, checked, "the embedded table")

	// "On each store": one row per store, each its JSON file's two passes.
	files := map[string]string{"memory": "fencing-memory-1m.json", "SQLite": "fencing-sqlite-1m.json",
		"MariaDB": "fencing-mysql-1m.json", "PostgreSQL": "fencing-postgres-1m.json"}
	stores := 0
	for _, tb := range tables(md) {
		if len(tb.header) == 0 || tb.header[0] != "store (guard)" {
			continue
		}
		for _, cells := range tb.rows {
			store := tb.cell(t, cells, "store (guard)")
			name := files[strings.Fields(store)[0]]
			require.NotEmpty(t, name, "line %d: a store without a JSON file: %q", tb.line, store)
			stores++
			var run struct {
				Version string `json:"storage_version"`
				Results []pass
			}
			readJSON(t, name, &run)
			byMode := map[string]pass{}
			for _, x := range run.Results {
				byMode[x.Mode] = x
			}
			u, f := byMode["unfenced"], byMode["fenced"]
			require.NotEmpty(t, u.Mode, name)
			require.NotEmpty(t, f.Mode, name)
			if v := versionNumber.FindString(run.Version); v != "" {
				assert.Contains(t, store, " "+v+" ", "line %d (%s: %s)", tb.line, name, run.Version)
			}
			dup := func(p pass) string {
				d := "**" + thousands(p.Duplicates) + "**"
				if p.Duplicates > 0 {
					d += fmt.Sprintf(" (%.2f%%)", 100*float64(p.Duplicates)/float64(p.Jobs))
				}
				return d
			}
			want := map[string]string{
				"holders paused": thousands(u.Pauses), "duplicates unfenced": dup(u), "duplicates fenced": dup(f),
				"rejected writes": thousands(f.Rejections), "wall unfenced / fenced": f0(u.WallSeconds) + " s / " + f0(f.WallSeconds) + " s",
			}
			for col, v := range want {
				assert.Equal(t, v, tb.cell(t, cells, col), "line %d, %s, %s (%s)", tb.line, store, col, name)
			}
		}
	}
	assert.Equal(t, len(files), stores, "one row per store in \"On each store\"")
}

// chooseRun is what docs/choosing.md quotes of `redlock-bench choose -o json`.
type chooseRun struct {
	Started    time.Time   `json:"started"`
	Elapsed    float64     `json:"elapsed_s"`
	Backend    string      `json:"backend"`
	GoMaxProcs int         `json:"gomaxprocs"`
	DurationS  float64     `json:"duration_s"`
	Keys       int         `json:"keys"`
	Results    []chooseRow `json:"results"`
}

// chooseRow is one option at one concurrency; its fence and failure columns repeat on each of
// the option's rows.
type chooseRow struct {
	Option             string  `json:"option"`
	Concurrency        int     `json:"concurrency"`
	Errors             int64   `json:"errors"`
	AcquireP50Us       float64 `json:"acquire_p50_us"`
	AcquireP99Us       float64 `json:"acquire_p99_us"`
	CyclesPerSec       float64 `json:"cycles_per_sec"`
	Fence              string  `json:"fence"`
	StaleWriteAccepted bool    `json:"stale_write_accepted"`
	StaleWrite         string  `json:"stale_write"`
	AfterFailover      string  `json:"after_failover"`
}

func chooseJSON(t *testing.T) *chooseRun {
	t.Helper()
	var r chooseRun
	readJSON(t, "choose.json", &r)
	require.NotEmpty(t, r.Results, "choose.json")
	return &r
}

// row finds option's result at concurrency c.
func (r *chooseRun) row(t *testing.T, option string, c int) chooseRow {
	t.Helper()
	for _, x := range r.Results {
		if x.Option == option && x.Concurrency == c {
			return x
		}
	}
	t.Fatalf("choose.json has no result %q at c=%d", option, c)
	return chooseRow{}
}

// options lists the options in the order of their first rows.
func (r *chooseRun) options() []string {
	var out []string
	for _, x := range r.Results {
		if !slices.Contains(out, x.Option) {
			out = append(out, x.Option)
		}
	}
	return out
}

// concurrencies lists option's concurrencies in the order of its rows.
func (r *chooseRun) concurrencies(option string) []int {
	var out []int
	for _, x := range r.Results {
		if x.Option == option {
			out = append(out, x.Concurrency)
		}
	}
	return out
}

// TestChoosingTable: the table of docs/choosing.md after the line naming bench/choose.json is
// that file's rows, each figure rounded as printed; an option's fence and failure columns are
// printed on its first row only, and so must be the same on all of its rows in the JSON.
func TestChoosingTable(t *testing.T) {
	md := readDoc(t, "choosing.md")
	run := chooseJSON(t)
	var found []table
	for _, tb := range tables(md) {
		if source(tb.caption) == "choose.json" {
			found = append(found, tb)
		}
	}
	require.Len(t, found, 1, "one table after the line naming bench/choose.json")
	tb := found[0]
	assert.Len(t, tb.rows, len(run.Results), "line %d: one row per result of choose.json", tb.line)
	shown := map[string]bool{} // option/c
	for _, cells := range tb.rows {
		option := tb.cell(t, cells, "option")
		c, err := strconv.Atoi(tb.cell(t, cells, "c"))
		require.NoError(t, err, "line %d", tb.line)
		x := run.row(t, option, c)
		want := map[string]string{
			"acquire_p50_us": f0(x.AcquireP50Us), "acquire_p99_us": f0(x.AcquireP99Us),
			"cycles_per_sec": f0(x.CyclesPerSec), "errors": strconv.FormatInt(x.Errors, 10),
			"fence": "", "stale_write_accepted": "", "after_failover": "",
		}
		first := run.row(t, option, run.concurrencies(option)[0])
		if c == first.Concurrency {
			want["fence"], want["stale_write_accepted"], want["after_failover"] =
				x.Fence, strconv.FormatBool(x.StaleWriteAccepted), x.AfterFailover
		}
		for col, v := range want {
			assert.Equal(t, v, tb.cell(t, cells, col), "line %d, %s c=%d, %s (choose.json)", tb.line, option, c, col)
		}
		key := fmt.Sprintf("%s/%d", option, c)
		assert.False(t, shown[key], "line %d: %s c=%d twice", tb.line, option, c)
		shown[key] = true
	}
	for _, x := range run.Results {
		first := run.row(t, x.Option, run.concurrencies(x.Option)[0])
		assert.Equal(t, []any{first.Fence, first.StaleWriteAccepted, first.AfterFailover},
			[]any{x.Fence, x.StaleWriteAccepted, x.AfterFailover},
			"choose.json: %s c=%d differs from the option's first row in a column the table prints once", x.Option, x.Concurrency)
	}
}

// TestChoosingProse: the figures and comparisons the text of docs/choosing.md draws from
// choose.json, and its retelling of the failure columns.
func TestChoosingProse(t *testing.T) {
	text := prose(readDoc(t, "choosing.md"))
	run := chooseJSON(t)
	has := func(want string) {
		t.Helper()
		assert.True(t, strings.Contains(text, want), "docs/choosing.md does not say %q", want)
	}
	options := run.options()
	at := func(option string, c int) chooseRow { return run.row(t, option, c) }

	// How the run was made.
	n := word(len(options))
	has(strings.ToUpper(n[:1]) + n[1:] + " ways to keep two workers out of one critical section")
	cs := run.concurrencies(options[0])
	for _, o := range options {
		assert.Equal(t, cs, run.concurrencies(o), "choose.json: %s's concurrencies", o)
	}
	assert.Equal(t, 1.0, run.DurationS, "the text says one second per row")
	has(fmt.Sprintf("Each option is run at %s goroutines for one second per row", series(cs)))
	has(fmt.Sprintf("on locks spread over %s resources", thousands(int64(run.Keys))))
	has(fmt.Sprintf("`redlock-bench choose -backend %s -o json", run.Backend))
	has(run.Started.UTC().Format("2006-01-02 15:04") + " UTC, on a machine doing nothing else")
	m := regexp.MustCompile(`(\d+) s for the whole command, .make.'s build included`).FindStringSubmatch(text)
	require.NotNil(t, m, "the sentence on the whole command's time")
	whole, _ := strconv.ParseFloat(m[1], 64)
	assert.GreaterOrEqual(t, whole, run.Elapsed, "the whole command, build included, took less than choose.json's elapsed_s")

	// Each option's paragraph.
	byP50 := func(c int) []string { // fastest first
		out := slices.Clone(options)
		slices.SortFunc(out, func(a, b string) int { return cmp.Compare(at(a, c).AcquireP50Us, at(b, c).AcquireP50Us) })
		return out
	}
	byCycles := func(c int) []string { // most first
		out := slices.Clone(options)
		slices.SortFunc(out, func(a, b string) int { return cmp.Compare(at(b, c).CyclesPerSec, at(a, c).CyclesPerSec) })
		return out
	}
	single1, redlock1, etcd1 := at("single-redis", 1), at("redlock", 1), at("etcd", 1)
	has(fmt.Sprintf("cheapest lock here at one goroutine (%s µs p50, one round trip)", f0(single1.AcquireP50Us)))
	assert.Equal(t, "single-redis", byP50(1)[0], "the text says single-redis is the cheapest at one goroutine")

	has(fmt.Sprintf("about %s times the single lock's latency at one goroutine here (%s µs p50,",
		word(int(math.Round(redlock1.AcquireP50Us/single1.AcquireP50Us))), f0(redlock1.AcquireP50Us)))
	has(fmt.Sprintf("on %s shared cores the five masters also cap throughput well below the single server's", word(run.GoMaxProcs)))
	for _, c := range cs {
		assert.Less(t, at("redlock", c).CyclesPerSec, at("single-redis", c).CyclesPerSec/2,
			"c=%d: the text says redlock's throughput is well below (under half) the single server's", c)
	}

	has(fmt.Sprintf("It is the slowest to acquire here, %.1f ms p50 at one goroutine", etcd1.AcquireP50Us/1000))
	for _, c := range cs {
		assert.Equal(t, "etcd", byP50(c)[len(options)-1], "c=%d: the text says etcd is the slowest to acquire", c)
	}

	pg8, pg64, single64 := at("postgres", 8), at("postgres", 64), at("single-redis", 64)
	has(fmt.Sprintf("the fastest option at 8 connections here (%s cycles/s;", hundreds(pg8.CyclesPerSec)))
	assert.Equal(t, "postgres", byCycles(8)[0], "the text says postgres has the most cycles/s at c=8")
	has(fmt.Sprintf("second to single-redis at 64 (%s cycles/s against %s)", hundreds(pg64.CyclesPerSec), hundreds(single64.CyclesPerSec)))
	assert.Equal(t, []string{"single-redis", "postgres"}, byCycles(64)[:2], "the order the text gives at c=64")

	// The failure columns as the paragraphs tell them.
	for _, f := range []struct {
		option   string
		accepted bool
		failover string // the prefix of after_failover
		says     []string
	}{
		{"single-redis", true, "lost: primary killed before the key replicated", []string{
			"the paused holder's late write landed over the next holder's",
			"when the primary died before its replica had the key, the promoted replica handed the lock to a second holder"}},
		{"redlock", false, "kept: 1 of 5 masters killed while held, a second client refused", []string{
			"a second client was refused with one master of five dead",
			"what made the stale write fail in this run is the fence"}},
		{"etcd", false, "kept: the leader (1 of 3 members) killed while held, a second session refused, then granted after the release", []string{
			"the failover run killed the leader while the lock was held, and after the election a second session was still refused, then granted once the holder released",
			"it made the guard refuse the paused holder's write"}},
		{"postgres", false, "not run:", []string{"its later write, sent again through a new connection with the version it had read, changed no row",
			"No failover was run"}},
	} {
		x := at(f.option, cs[0])
		assert.Equal(t, f.accepted, x.StaleWriteAccepted, "%s: stale_write_accepted, as the text tells it", f.option)
		assert.True(t, strings.HasPrefix(x.AfterFailover, f.failover), "%s: after_failover %q, the text tells %q", f.option, x.AfterFailover, f.failover)
		for _, s := range f.says {
			has(s)
		}
	}
	assert.Contains(t, at("postgres", cs[0]).StaleWrite, "0 rows updated", "the text says the late write changed no row")
}

// TestTablesParsed: the table reader sees a caption, the header and the rows, and no alignment
// row; the number formatters print as the docs do.
func TestTablesParsed(t *testing.T) {
	md := "text\n\n**Run** (`healthy.json`)\n\n| a | b |\n|---|--:|\n| 1 | 2 |\n| 3 | 4 |\nafter\n"
	got := tables(md)
	require.Len(t, got, 1)
	assert.Equal(t, "healthy.json", source(got[0].caption))
	assert.Equal(t, []string{"a", "b"}, got[0].header)
	assert.Equal(t, [][]string{{"1", "2"}, {"3", "4"}}, got[0].rows)
	assert.Equal(t, 5, got[0].line)
	assert.Equal(t, "1,000,000", thousands(1_000_000))
	assert.Equal(t, "999", thousands(999))
	assert.Equal(t, "11,400", hundreds(11425.2))
	assert.Equal(t, "1, 8 and 64", series([]int{1, 8, 64}))
	assert.Equal(t, "eight", word(8))
}
