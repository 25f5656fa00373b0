package chaos

import (
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/cmd/redlock-bench/internal/chaosstore"
	"quorumlock.dev/internal/harness/pgtest"
	"quorumlock.dev/internal/harness/redistest"
)

// TestMain makes the test binary a worker when the suite starts it as one.
func TestMain(m *testing.M) {
	MaybeWorker()
	code := m.Run()
	if err := pgtest.StopShared(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

// TestQuick runs every scenario at the quick size on real servers and requires each row to
// hold: no fenced duplicate, no lost write, no fence twice, every stale write rejected, a
// linearizable store, the fault verified, the scenario's own bounds, and, where the lock alone
// cannot hold, the failure really provoked (an overlap or a stale write, and a duplicate in
// the unfenced twin). CHAOS_SCENARIO=name runs one.
func TestQuick(t *testing.T) {
	redistest.Need(t)
	names := Names()
	if only := os.Getenv("CHAOS_SCENARIO"); only != "" {
		names = []string{only}
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			// Two scenarios at a time (-parallel, GOMAXPROCS by default):
			// each has servers on ports, namespaces and a store of its own.
			t.Parallel()
			rows, err := Run(t.Context(), Config{Scenarios: []string{name}, Quick: true, Progress: testWriter{t}})
			require.NoError(t, err)
			require.Len(t, rows, 1)
			r := rows[0]
			if r.Skipped != "" {
				if os.Getenv("CI") == "true" {
					t.Fatalf("%s under CI=true: %s", name, r.Skipped)
				}
				t.Skip(r.Skipped)
			}
			t.Logf("%+v", r)
			assert.True(t, r.Held, r.Problems)
			assert.Positive(t, r.Acquisitions)
			if find(name).mustObserve {
				assert.True(t, r.Observed, "the failure the scenario exists for was not seen")
				assert.Positive(t, r.UnfencedDuplicates, "the lock alone let no duplicate through")
				assert.Zero(t, r.FencedDuplicates)
			}
		})
	}
}

// TestPostgresStore: the paused holder's late write is refused by PostgreSQL through
// pgfence.Guard, as it is by the memory store, and the unfenced table takes the duplicate.
func TestPostgresStore(t *testing.T) {
	redistest.Need(t)
	dsn := pgtest.NewDatabase(t, pgtest.Shared(t))
	rows, err := Run(t.Context(), Config{Scenarios: []string{"holder-pause"}, Quick: true, Store: chaosstore.Spec{Kind: chaosstore.Postgres, DSN: dsn}, Progress: testWriter{t}})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	r := rows[0]
	assert.Equal(t, "postgres", r.Store)
	assert.True(t, r.Held, r.Problems)
	assert.Positive(t, r.StaleWrites)
	assert.Equal(t, r.StaleWrites, r.StaleWritesRejected)
	assert.Positive(t, r.UnfencedDuplicates)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }
