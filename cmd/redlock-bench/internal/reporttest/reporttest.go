// Package reporttest reads back what package output writes, so that tests can
// check a run's figures. Nothing but tests reads reports: the CLI only writes.
package reporttest

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
	"time"

	"quorumlock.dev/cmd/redlock-bench/internal/output"
	"quorumlock.dev/cmd/redlock-bench/internal/report"
)

// ReadJSON parses a report written by output.Write in the "json" format. An
// unknown field is an error: a misspelt one would otherwise read as zero.
func ReadJSON(r io.Reader) (*report.Report, error) {
	var rep report.Report
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		return nil, fmt.Errorf("reporttest: read json report: %w", err)
	}
	return &rep, nil
}

// ReadCSV parses rows written by output.Write in the "csv" format. The header
// must equal output.CSVColumns exactly, or values would land in the wrong
// fields without a word.
func ReadCSV(r io.Reader) ([]report.Row, error) {
	columns := output.CSVColumns()
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err == io.EOF {
		return nil, errors.New("reporttest: read csv: empty input, want a header line")
	}
	if err != nil {
		return nil, fmt.Errorf("reporttest: read csv: %w", err)
	}
	if !slices.Equal(header, columns) {
		return nil, fmt.Errorf("reporttest: read csv: header %q does not match the columns of this version %q",
			strings.Join(header, ","), strings.Join(columns, ","))
	}
	rows := []report.Row{}
	for {
		record, err := cr.Read()
		if err == io.EOF {
			return rows, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reporttest: read csv: %w", err)
		}
		line, _ := cr.FieldPos(0)
		var row report.Row
		v := reflect.ValueOf(&row).Elem()
		for i := range columns {
			if err := setField(v.Field(i), record[i]); err != nil {
				return nil, fmt.Errorf("reporttest: read csv: line %d, column %s: %w", line, columns[i], err)
			}
		}
		rows = append(rows, row)
	}
}

func setField(f reflect.Value, s string) error {
	switch f.Kind() {
	case reflect.String:
		f.SetString(s)
	case reflect.Int, reflect.Int64:
		n, err := strconv.ParseInt(s, 10, f.Type().Bits())
		if err != nil {
			return err
		}
		f.SetInt(n)
	case reflect.Float64:
		x, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return err
		}
		f.SetFloat(x)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return err
		}
		f.SetBool(b)
	default:
		return fmt.Errorf("kind %s not read", f.Kind())
	}
	return nil
}

// Realistic returns a report like a healthy run at two concurrencies plus
// the slow and dead variants, with latencies in the shapes the runner
// produces; each call returns a new one.
func Realistic() *report.Report {
	row := func(mode string, masters, c int, p50 float64) report.Row {
		return report.Row{
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

	return &report.Report{
		Backend: "redis-server",
		Servers: []report.ServerInfo{
			{Role: "single", Addr: "127.0.0.1:40100", Version: "7.2.4"},
			{Role: "master", Addr: "127.0.0.1:40101", Version: "7.2.4"},
			{Role: "master", Addr: "127.0.0.1:40102", Version: "7.2.5"},
			{Role: "fence", Addr: "127.0.0.1:40106", Version: "7.4.1"},
		},
		Started:    time.Date(2025, 3, 14, 15, 9, 26, 535897000, time.UTC),
		Elapsed:    24.318,
		GoMaxProcs: 8,
		Config: report.ConfigEcho{
			Scenario: "healthy", Masters: 5, TTLms: 10000, NodeTimeout: 50, Keys: 10000,
			Rounds: 4, DurationS: 2,
		},
		Results: []report.Row{single1, redlock1, single8, redlock8, slow, dead},
	}
}
