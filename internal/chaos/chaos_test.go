package chaos

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/internal/redistest"
)

// TestMain makes the test binary a worker when the suite starts it as one.
func TestMain(m *testing.M) {
	MaybeWorker()
	os.Exit(m.Run())
}

// TestQuick runs every scenario at the quick size on real servers and requires each row to
// hold: no fenced duplicate, no lost write, every stale write rejected, the scenario's fault
// verified and its failure provoked where the lock alone cannot hold.
func TestQuick(t *testing.T) {
	redistest.Need(t)
	names := Names()
	if only := os.Getenv("CHAOS_SCENARIO"); only != "" {
		names = []string{only}
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			rows, err := Run(t.Context(), Config{Scenarios: []string{name}, Quick: true, Progress: testWriter{t}})
			require.NoError(t, err)
			require.Len(t, rows, 1)
			r := rows[0]
			t.Logf("%+v", r)
			assert.True(t, r.Held, r.Problems)
			assert.Positive(t, r.Acquisitions)
		})
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }
