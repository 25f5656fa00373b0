// Package output writes a [report.Report] as a text table, one JSON object
// or CSV rows; the CSV columns are [CSVColumns], listed in redlock-bench's
// manual.
package output

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"quorumlock.dev/cmd/redlock-bench/internal/report"
)

// Formats lists the output formats Write accepts, in the order a -format
// flag's help text should offer them.
var Formats = []string{"text", "json", "csv"}

// ErrFormat reports an output format (or plot file extension) that this
// package cannot write. It is wrapped together with the offending name.
var ErrFormat = errors.New("output: unknown output format")

// Write writes r to w in format, one of [Formats]: "text", a header and an
// aligned table for people; "json", the whole report as one indented object;
// "csv", the rows alone under a header of [CSVColumns]. An unknown format
// writes nothing and returns an error wrapping [ErrFormat].
func Write(w io.Writer, r *report.Report, format string) error {
	switch format {
	case "text":
		return writeText(w, r)
	case "json":
		return writeJSON(w, r)
	case "csv":
		return writeCSV(w, r.Results)
	}
	return fmt.Errorf("%w %q (want one of %s)", ErrFormat, format, strings.Join(Formats, ", "))
}

func writeJSON(w io.Writer, r *report.Report) error {
	out := *r
	// jq '.results[]' fails on null; an empty run should still iterate.
	if out.Results == nil {
		out.Results = []report.Row{}
	}
	if out.Servers == nil {
		out.Servers = []report.ServerInfo{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(&out); err != nil {
		return fmt.Errorf("output: write json report: %w", err)
	}
	return nil
}

// rowCodec maps Row's fields to CSV columns. It is derived from the struct
// by reflection so that adding a field to Row cannot leave the CSV behind.
type rowCodec struct {
	columns []string
	kinds   []reflect.Kind
}

var csvCodec = sync.OnceValue(func() rowCodec {
	t := reflect.TypeFor[report.Row]()
	var c rowCodec
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			panic("output: Row field " + f.Name + " has no json name for its CSV column")
		}
		switch k := f.Type.Kind(); k {
		case reflect.String, reflect.Int, reflect.Int64, reflect.Float64, reflect.Bool:
			c.kinds = append(c.kinds, k)
		default:
			panic("output: Row field " + f.Name + " has kind " + k.String() + ", which the CSV codec does not handle")
		}
		c.columns = append(c.columns, name)
	}
	return c
})

// CSVColumns returns the CSV header that Write uses: the json names of
// [report.Row]'s fields, in field order. The slice is the caller's to keep.
func CSVColumns() []string {
	return slices.Clone(csvCodec().columns)
}

func writeCSV(w io.Writer, rows []report.Row) error {
	c := csvCodec()
	cw := csv.NewWriter(w)
	if err := cw.Write(c.columns); err != nil {
		return fmt.Errorf("output: write csv: %w", err)
	}
	record := make([]string, len(c.columns))
	for _, row := range rows {
		v := reflect.ValueOf(row)
		for i, k := range c.kinds {
			f := v.Field(i)
			switch k {
			case reflect.String:
				record[i] = f.String()
			case reflect.Int, reflect.Int64:
				record[i] = strconv.FormatInt(f.Int(), 10)
			case reflect.Float64:
				record[i] = strconv.FormatFloat(f.Float(), 'f', -1, 64)
			case reflect.Bool:
				record[i] = strconv.FormatBool(f.Bool())
			}
		}
		if err := cw.Write(record); err != nil {
			return fmt.Errorf("output: write csv: %w", err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("output: write csv: %w", err)
	}
	return nil
}

// stickyWriter keeps the first write error, so the text writer can print
// freely and still report a closed pipe once, at the end.
type stickyWriter struct {
	w   io.Writer
	err error
}

func (s *stickyWriter) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.w.Write(p)
	s.err = err
	return n, err
}

func writeText(w io.Writer, r *report.Report) error {
	sw := &stickyWriter{w: w}
	tw := tabwriter.NewWriter(sw, 0, 0, 2, ' ', 0)

	fmt.Fprintf(tw, "backend: %s, started %s, elapsed %s, GOMAXPROCS %d\n",
		r.Backend, r.Started.Format(time.RFC3339), fmtSeconds(r.Elapsed), r.GoMaxProcs)
	// On the embedded backend the servers share the process: its allocations
	// and CPU are not the client's alone, and the columns must not read so.
	process := ""
	if r.ServersInProcess {
		process = " (client + servers)"
		fmt.Fprintln(tw, "allocs/op and CPU s count the in-process servers too, not the client alone")
	}
	fmt.Fprintln(tw)

	if len(r.Servers) > 0 {
		fmt.Fprintln(tw, "role\taddr\tversion")
		for _, s := range r.Servers {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Role, s.Addr, s.Version)
		}
		fmt.Fprintln(tw)
	}

	c := r.Config
	per := fmtSeconds(c.DurationS) + " per row"
	if c.Cycles > 0 {
		per = strconv.FormatInt(c.Cycles, 10) + " cycles per row"
	}
	fmt.Fprintf(tw, "config: scenario %s, masters %d, ttl %s, node timeout %s, hold %s, keys %d, fence %t, rounds %d, %s\n\n",
		c.Scenario, c.Masters, report.Duration(c.TTLms), report.Duration(c.NodeTimeout), report.Duration(c.HoldMs), c.Keys, c.Fence, c.Rounds, per)

	if c.Scenario == "contended" {
		writeContended(tw, r.Results, process)
	} else {
		writeUncontended(tw, r.Results, process)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("output: write text report: %w", err)
	}
	// A count of errors says nothing an operator can act on: the first of
	// each row does. Below the table, where tabwriter does not align it,
	// one line each: a joined error's lines would read as rows of their own.
	labels := report.Labels(r.Results, false)
	for i, row := range r.Results {
		if row.FirstError != "" {
			fmt.Fprintf(sw, "first error of %s c=%d: %s\n", labels[i], row.Concurrency, joinLines(row.FirstError))
		}
	}
	if r.ServersInProcess && starved(r.Results) {
		fmt.Fprintf(sw, "note: the embedded backend's servers run in this process and share its GOMAXPROCS=%d with the client;\n"+
			"under this load they are starved of CPU and miss the %s node timeout, so the errors and unavailable\n"+
			"attempts above are about this machine, not the lock. For figures to draw conclusions from, run real\n"+
			"servers: -backend redis-server, or -addrs.\n", r.GoMaxProcs, report.Duration(r.Config.NodeTimeout))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("output: write text report: %w", err)
	}
	if sw.err != nil {
		return fmt.Errorf("output: write text report: %w", sw.err)
	}
	return nil
}

// joinLines joins the lines of a message, as errors.Join makes them, with
// "; ", so that it fits on one line.
func joinLines(s string) string {
	s = strings.TrimRight(s, "\r\n")
	s = strings.ReplaceAll(s, "\r\n", "\n")
	return strings.ReplaceAll(s, "\n", "; ")
}

// starved reports rows whose attempts failed in a way that, with every
// master alive, only a missed node timeout explains: errors, or a quorum
// found unavailable.
func starved(rows []report.Row) bool {
	for _, row := range rows {
		if row.Errors > 0 || (row.Unavailable > 0 && row.Dead == 0) {
			return true
		}
	}
	return false
}

func writeUncontended(tw io.Writer, rows []report.Row, process string) {
	fmt.Fprintf(tw, "scenario\tvariant\tc\tkeys\tops/s\tp50 µs\tp90 µs\tp99 µs\tp99.9 µs\tmax µs\tcycle p50 µs\tacquired\tcontended\tunavailable\terrors\tallocs/op%s\tCPU s%s\tp50 ratio\n",
		process, process)
	for i, label := range report.Labels(rows, false) {
		row := rows[i]
		// A ratio of 0 means one of the two rows acquired nothing (its
		// p50 is of failures), not that this row was infinitely fast.
		ratio := "-"
		switch {
		case row.RatioOf != "" && row.Acquired == 0:
			ratio = "- (acquired nothing)"
		case row.RatioOf != "" && row.RatioP50 == 0:
			ratio = "- (" + row.RatioOf + " acquired nothing)"
		case row.RatioOf != "" && row.RatioP50 > 0:
			prec := 2
			if row.RatioP50 >= 10 {
				prec = 1
			}
			ratio = strconv.FormatFloat(row.RatioP50, 'f', prec, 64) + "× " + row.RatioOf
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%.1f\t%.2f\t%s\n",
			row.Scenario, label, row.Concurrency, row.Keys, fmtRate(row.OpsPerSec),
			fmtMicros(row.AcquireP50Us), fmtMicros(row.AcquireP90Us), fmtMicros(row.AcquireP99Us),
			fmtMicros(row.AcquireP999Us), fmtMicros(row.AcquireMaxUs), fmtMicros(row.CycleP50Us),
			row.Acquired, row.Contended, row.Unavailable, row.Errors,
			row.AllocsPerOp, row.CPUSeconds, ratio)
	}
}

// writeContended prints the contended scenario's rows: its latencies are
// Lock's waits for the others, so they get their own columns.
func writeContended(tw io.Writer, rows []report.Row, process string) {
	fmt.Fprintf(tw, "scenario\tvariant\tc\tkeys\tsections/s\tLock p50 µs\twait p99 µs\thandoff p50 µs\thandoff p99 µs\tfairness\tsplit %%\tviolations\tacquired\tgave up\tunavailable\terrors\tallocs/op%s\tCPU s%s\n",
		process, process)
	for i, label := range report.Labels(rows, false) {
		row := rows[i]
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%.2f\t%s\t%d\t%d\t%d\t%d\t%d\t%.1f\t%.2f\n",
			row.Scenario, label, row.Concurrency, row.Keys, fmtRate(row.SectionsPerSec),
			fmtMicros(row.AcquireP50Us), fmtMicros(row.WaitP99Us), fmtMicros(row.HandoffP50Us), fmtMicros(row.HandoffP99Us),
			row.Fairness, fmtSplit(row), row.Violations, row.Acquired, row.Contended, row.Unavailable, row.Errors,
			row.AllocsPerOp, row.CPUSeconds)
	}
}

// fmtSplit is a row's split rounds in percent of its lost rounds; "-" when
// it lost none, and so has no share to show.
func fmtSplit(row report.Row) string {
	if row.LostRounds == 0 {
		return "-"
	}
	return strconv.FormatFloat(row.SplitPct, 'f', 1, 64)
}

// fmtMicros rounds a latency to the digits that mean something: a tenth of a
// microsecond says nothing about a 2 ms call, but a lot about a 3 µs one.
func fmtMicros(us float64) string {
	switch {
	case us == 0:
		return "0"
	case us < 10:
		return strconv.FormatFloat(us, 'f', 2, 64)
	case us < 100:
		return strconv.FormatFloat(us, 'f', 1, 64)
	}
	return strconv.FormatFloat(us, 'f', 0, 64)
}

// fmtRate keeps one decimal only where the run was slow enough for it to
// matter, as in the dead-master scenario.
func fmtRate(opsPerSec float64) string {
	if opsPerSec < 100 {
		return strconv.FormatFloat(opsPerSec, 'f', 1, 64)
	}
	return strconv.FormatFloat(opsPerSec, 'f', 0, 64)
}

// fmtSeconds prints the report's float seconds the way the CLI's flags take
// them (-d 2s), as report.Duration does milliseconds, so a header can be
// pasted back as flags.
func fmtSeconds(v float64) string {
	return time.Duration(v * float64(time.Second)).Round(time.Millisecond).String()
}

// WriteRowsCSV writes rows of a struct type as CSV: a header of the
// fields' json names, then one record per row, floats in their shortest
// exact form and anything else as fmt.Sprint prints it. The chaos and
// choose subcommands' rows use it.
func WriteRowsCSV[T any](w io.Writer, rows []T) error {
	cw := csv.NewWriter(w)
	var head []string
	for f := range reflect.TypeFor[T]().Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		head = append(head, name)
	}
	_ = cw.Write(head)
	for _, r := range rows {
		v := reflect.ValueOf(r)
		rec := make([]string, v.NumField())
		for i := range rec {
			switch f := v.Field(i); f.Kind() {
			case reflect.Float64:
				rec[i] = strconv.FormatFloat(f.Float(), 'f', -1, 64)
			default:
				rec[i] = fmt.Sprint(f.Interface())
			}
		}
		_ = cw.Write(rec)
	}
	cw.Flush()
	return cw.Error()
}
