// Package report is the model of what a redlock-bench run measured: a
// [Report] with one flat [Row] per variant and concurrency. Writing it as
// text, JSON or CSV is package output's job; drawing it, package plot's.
package report

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// Report is the result of one run: what was measured on what, and one row
// per measured variant.
type Report struct {
	Backend string `json:"backend"` // embedded, redis-server or addrs
	// ServersInProcess is true when the servers ran in the measuring process
	// (the embedded backend): every row's allocs_per_op and cpu_seconds then
	// count the servers' work too, not the client's alone.
	ServersInProcess bool         `json:"servers_in_process"`
	Servers          []ServerInfo `json:"servers"` // every server the run used, with its version
	Started          time.Time    `json:"started"` // wall clock at the start of the run
	Elapsed          float64      `json:"elapsed_s"`
	GoMaxProcs       int          `json:"gomaxprocs"`
	GoVersion        string       `json:"go_version"`
	Platform         string       `json:"platform"` // GOOS/GOARCH
	Config           ConfigEcho   `json:"config"`
	Results          []Row        `json:"results"`
}

// ServerInfo names one server of the run.
type ServerInfo struct {
	Role    string `json:"role"` // master, single, fence
	Addr    string `json:"addr"`
	Version string `json:"version"` // redis_version, or "miniredis vX" for the embedded backend
}

// ConfigEcho repeats the settings of the run, so a report stands alone.
type ConfigEcho struct {
	Scenario    string   `json:"scenario"`
	Masters     int      `json:"masters"`
	TTLms       float64  `json:"ttl_ms"`
	NodeTimeout float64  `json:"node_timeout_ms"`
	HoldMs      float64  `json:"hold_ms"`
	Keys        int      `json:"keys"`
	Fence       bool     `json:"fence"`
	Rounds      int      `json:"rounds"`
	DurationS   float64  `json:"duration_s"` // per row; 0 when Cycles is set
	Cycles      int64    `json:"cycles"`     // per row; 0 when DurationS is set
	Drivers     []string `json:"drivers"`    // the Redis clients measured, each a dimension of every row
	Raw         bool     `json:"raw"`        // the raw quorum loop was measured beside the lock
}

// Row is one measured variant at one concurrency: flat, so that CSV and JSON
// carry the same fields. Latencies are in microseconds.
type Row struct {
	Mode        string  `json:"mode"`     // redlock, raw (the raw quorum loop), single or redsync (the contended baseline)
	Variant     string  `json:"variant"`  // names the row within its scenario; ratio_of refers to it
	Masters     int     `json:"masters"`  // masters of this variant (1 for single)
	Scenario    string  `json:"scenario"` // healthy, slow, dead, scale, contended
	Concurrency int     `json:"concurrency"`
	Keys        int     `json:"keys"`
	DelayMs     float64 `json:"delay_ms"` // added latency on the slow master (slow scenario)
	Dead        int     `json:"dead"`     // unreachable masters (dead scenario)
	Fence       bool    `json:"fence"`
	HoldMs      float64 `json:"hold_ms"`

	Attempts  int64   `json:"attempts"`    // TryLock calls
	Cycles    int64   `json:"cycles"`      // acquired and released
	Seconds   float64 `json:"seconds"`     // time spent measuring this row
	OpsPerSec float64 `json:"ops_per_sec"` // cycles per second

	AcquireP50Us  float64 `json:"acquire_p50_us"` // every TryLock call, whatever its outcome
	AcquireP90Us  float64 `json:"acquire_p90_us"`
	AcquireP99Us  float64 `json:"acquire_p99_us"`
	AcquireP999Us float64 `json:"acquire_p999_us"`
	AcquireMaxUs  float64 `json:"acquire_max_us"`
	CycleP50Us    float64 `json:"cycle_p50_us"` // TryLock + hold + Unlock, acquired cycles only

	Acquired    int64  `json:"acquired"`
	Contended   int64  `json:"contended"`             // ErrNotAcquired
	Unavailable int64  `json:"unavailable"`           // ErrQuorumUnavailable or ErrFenceUnavailable
	Errors      int64  `json:"errors"`                // anything else, Unlock failures included
	FirstError  string `json:"first_error,omitempty"` // the first of Errors, said as the library said it

	AllocsPerOp float64 `json:"allocs_per_op"` // heap allocations of the whole process per attempt; see Report.ServersInProcess
	CPUSeconds  float64 `json:"cpu_seconds"`   // user+system CPU of the whole process; likewise

	// RatioP50 is this row's acquire p50 over the p50 of the row named by
	// RatioOf, measured in the same run ("" and 0 when there is none; 0 too
	// when either row acquired nothing, its p50 being of failures).
	RatioOf  string  `json:"ratio_of"`
	RatioP50 float64 `json:"ratio_p50"`

	// The contended scenario's figures (zero in every other row): each
	// goroutine calls Lock, which waits, holds the lock and releases it.
	SectionsPerSec float64 `json:"sections_per_sec"` // critical sections completed per second
	HandoffP50Us   float64 `json:"handoff_p50_us"`   // Unlock called -> another goroutine's Lock returned
	HandoffP99Us   float64 `json:"handoff_p99_us"`
	WaitP99Us      float64 `json:"wait_p99_us"` // Lock called -> won, won calls only
	Fairness       float64 `json:"fairness"`    // fewest sections of a goroutine over the most
	Violations     int64   `json:"violations"`  // sections that began while another goroutine held the resource

	// Driver is the Redis client the row's masters were reached through (redlock-bench
	// -driver); after it, so that the CSV columns before it keep their places, the fields
	// added since.
	Driver string `json:"driver"`

	// The contended scenario's acquisition attempts (rounds), as the clients' Attempt
	// hook counts them: every one (Lock's retries and handoffs included), those lost to
	// another holder (ErrNotAcquired), and of those the ones whose votes split: some
	// masters won but no majority (ErrVotesSplit). SplitPct is split over lost, in percent.
	Rounds      int64   `json:"rounds"`
	LostRounds  int64   `json:"lost_rounds"`
	SplitRounds int64   `json:"split_rounds"`
	SplitPct    float64 `json:"split_pct"`
}

// DefaultDriver is the driver of a run that names none; a table names a row's driver only
// when some row has another.
const DefaultDriver = "go-redis"

// Labels names each row for a table (chart false) or a chart: the variant
// always, the driver when any row's is not [DefaultDriver], fence and hold
// only where rows differ. For a chart, concurrency
// and keys that differ go on a second line, and equal labels get "#2", "#3"
// so that no two bar groups look like one variant.
func Labels(rows []Row, chart bool) []string {
	varies := func(f func(Row) string) bool {
		for _, r := range rows {
			if f(r) != f(rows[0]) {
				return true
			}
		}
		return false
	}
	fence := func(r Row) string {
		if r.Fence {
			return "fenced"
		}
		return "unfenced"
	}
	hold := func(r Row) string { return "hold " + Duration(r.HoldMs).String() }
	conc := func(r Row) string { return "c=" + strconv.Itoa(r.Concurrency) }
	keys := func(r Row) string { return "k=" + strconv.Itoa(r.Keys) }
	driver := func(r Row) string {
		if r.Driver == "" {
			return DefaultDriver
		}
		return r.Driver
	}
	named := slices.ContainsFunc(rows, func(r Row) bool { return driver(r) != DefaultDriver })
	var extras, loads []func(Row) string
	for _, f := range []func(Row) string{fence, hold} {
		if varies(f) {
			extras = append(extras, f)
		}
	}
	if chart {
		for _, f := range []func(Row) string{conc, keys} {
			if varies(f) {
				loads = append(loads, f)
			}
		}
	}

	labels := make([]string, len(rows))
	seen := map[string]int{}
	for i, r := range rows {
		var parts []string
		if named {
			parts = append(parts, driver(r))
		}
		if r.Mode == "single" {
			parts = append(parts, "single")
		} else {
			parts = append(parts, r.Mode, strconv.Itoa(r.Masters)+"m")
		}
		if r.DelayMs > 0 {
			parts = append(parts, "+"+Duration(r.DelayMs).String())
		}
		if r.Dead > 0 {
			parts = append(parts, strconv.Itoa(r.Dead)+" dead")
		}
		if how, ok := strings.CutPrefix(r.Variant, r.Mode+" "); ok {
			parts = append(parts, how) // "redlock fair": how its waiters wait
		}
		for _, f := range extras {
			parts = append(parts, f(r))
		}
		label := strings.Join(parts, " ")
		if len(loads) > 0 {
			parts = parts[:0]
			for _, f := range loads {
				parts = append(parts, f(r))
			}
			label += "\n" + strings.Join(parts, " ")
		}
		if chart {
			seen[label]++
			if n := seen[label]; n > 1 {
				label += " #" + strconv.Itoa(n)
			}
		}
		labels[i] = label
	}
	return labels
}

// Milliseconds and Duration convert between the report's float milliseconds
// and the time.Duration the CLI's flags take.
func Milliseconds(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Duration is the inverse of [Milliseconds].
func Duration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }
