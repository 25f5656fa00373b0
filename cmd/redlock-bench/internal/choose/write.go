package choose

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"quorumlock.dev/cmd/redlock-bench/internal/etcdcluster"
	"quorumlock.dev/cmd/redlock-bench/internal/output"

	"quorumlock.dev/cmd/redlock-bench/internal/report"
)

// Write writes rep as "text" (a table, the fence and failure columns once per option, then
// the skipped options), "json" (the whole report) or "csv" (the rows under a header of their
// json names, [Row]'s fields in order). Another format is an [ErrConfig].
func Write(w io.Writer, rep *Report, format string) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	case "csv":
		return writeCSV(w, rep.Results)
	case "text":
		return writeText(w, rep)
	}
	return fmt.Errorf("%w: output format %q (want text, json or csv)", ErrConfig, format)
}

func writeCSV(w io.Writer, rows []Row) error { return output.WriteRowsCSV(w, rows) }

func writeText(w io.Writer, rep *Report) error {
	fmt.Fprintf(w, "redis backend: %s, started %s, elapsed %.1fs, GOMAXPROCS %d, %v per row, ttl %v, %d keys\n\n",
		rep.Backend, rep.Started.Format(time.RFC3339), rep.Elapsed, rep.GoMaxProcs,
		time.Duration(rep.DurationS*float64(time.Second)), time.Duration(rep.TTLms*float64(time.Millisecond)), rep.Keys)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "option\tc\tacquire p50 µs\tacquire p99 µs\tcycles/s\terrors\tfence\tstale write accepted\tafter failover")
	for i, r := range rep.Results {
		fence, stale, after := "", "", ""
		if i == 0 || rep.Results[i-1].Option != r.Option {
			fence, stale, after = r.Fence, strconv.FormatBool(r.StaleWriteAccepted), r.AfterFailover
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%.0f\t%d\t%s\t%s\t%s\n",
			r.Option, r.Concurrency, r.AcquireP50Us, r.AcquireP99Us, r.CyclesPerSec, r.Errors, fence, stale, after)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range rep.Skipped {
		if _, err := fmt.Fprintf(w, "skipped %s: %s\n", s.Option, s.Reason); err != nil {
			return err
		}
	}
	return nil
}

// servers is the number of servers each option's lock runs on, for the chart's labels.
var servers = map[string]int{"single-redis": 1, "redlock": 5, "etcd": etcdcluster.Members, "postgres": 1}

// PlotReport is rep as the report package's model, for plot.Draw: one row per option and
// concurrency. The chart labels an option by its name and servers ("redlock 5m", "etcd
// 3m"), single-redis as the CLI's single mode.
func PlotReport(rep *Report) *report.Report {
	out := &report.Report{Backend: rep.Backend, Started: rep.Started, Elapsed: rep.Elapsed, GoMaxProcs: rep.GoMaxProcs}
	for _, r := range rep.Results {
		mode := r.Option
		if mode == "single-redis" {
			mode = "single"
		}
		out.Results = append(out.Results, report.Row{
			Mode: mode, Variant: mode, Masters: servers[r.Option], Scenario: "choose",
			Concurrency: r.Concurrency, Keys: rep.Keys, Attempts: r.Attempts, Cycles: r.Cycles,
			OpsPerSec: r.CyclesPerSec, AcquireP50Us: r.AcquireP50Us, AcquireP90Us: r.AcquireP90Us,
			AcquireP99Us: r.AcquireP99Us, AcquireP999Us: r.AcquireP999,
		})
	}
	return out
}
