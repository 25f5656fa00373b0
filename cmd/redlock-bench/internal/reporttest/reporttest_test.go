package reporttest_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/cmd/redlock-bench/internal/output"
	"quorumlock.dev/cmd/redlock-bench/internal/reporttest"
)

func TestReadJSONRejects(t *testing.T) {
	for name, in := range map[string]string{
		"not json":      "backend: embedded",
		"unknown field": `{"backend": "embedded", "resluts": []}`,
		"wrong type":    `{"backend": "embedded", "gomaxprocs": "8"}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := reporttest.ReadJSON(strings.NewReader(in))
			require.Error(t, err)
			assert.True(t, strings.HasPrefix(err.Error(), "reporttest: "), err.Error())
		})
	}
}

func TestReadCSVRejects(t *testing.T) {
	header := strings.Join(output.CSVColumns(), ",")
	var good bytes.Buffer
	require.NoError(t, output.Write(&good, reporttest.Realistic(), "csv"))
	_, firstRow, _ := strings.Cut(good.String(), "\n")
	firstRow, _, _ = strings.Cut(firstRow, "\n")
	with := func(column, value string) string {
		fields := strings.Split(firstRow, ",")
		for i, c := range output.CSVColumns() {
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
		{"missing column", header[:strings.LastIndexByte(header, ',')] + "\n", "does not match"},
		{"reordered", strings.Replace(header, "mode,variant", "variant,mode", 1) + "\n", "does not match"},
		{"bad float", with("ops_per_sec", "fast"), `line 2, column ops_per_sec: strconv.ParseFloat: parsing "fast"`},
		{"bad int", with("concurrency", "8.5"), "line 2, column concurrency"},
		{"bad bool", with("fence", "yes"), "line 2, column fence"},
		{"short row", header + "\nsingle,1\n", "wrong number of fields"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := reporttest.ReadCSV(strings.NewReader(tc.in))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.True(t, strings.HasPrefix(err.Error(), "reporttest: read csv: "), err.Error())
		})
	}
}

func TestReadCSVHeaderOnly(t *testing.T) {
	rows, err := reporttest.ReadCSV(strings.NewReader(strings.Join(output.CSVColumns(), ",") + "\n"))
	require.NoError(t, err)
	assert.Empty(t, rows)
}
