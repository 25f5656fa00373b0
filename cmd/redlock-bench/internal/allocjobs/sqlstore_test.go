package allocjobs

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite" // "sqlite"

	"quorumlock.dev/fence"
	"quorumlock.dev/fence/sqlfence"
)

func sqliteDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "jobs.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	require.NoError(t, err)
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// TestSQLStoreFence: on SQLite, a claim raises the row's fence, a write with an older fence
// is refused and leaves nothing behind, an unfenced write is not checked, and Audit counts a
// duplicate; Close drops the tables.
func TestSQLStoreFence(t *testing.T) {
	ctx := context.Background()
	db := sqliteDB(t)
	s := NewSQLStore(db, sqlfence.SQLite, "jobs_test")
	require.NoError(t, s.Setup(ctx, 2, 10))

	shipped, err := s.Begin(ctx, 1, 100, 7)
	require.NoError(t, err)
	assert.False(t, shipped)
	require.NoError(t, s.Ship(ctx, 1, 100, 7))
	_, err = s.Begin(ctx, 1, 101, 5)
	assert.ErrorIs(t, err, fence.ErrFenceRejected)
	assert.ErrorIs(t, s.Ship(ctx, 1, 100, 6), fence.ErrFenceRejected)
	shipped, err = s.Begin(ctx, 1, 100, 0)
	require.NoError(t, err)
	assert.True(t, shipped)
	require.NoError(t, s.Ship(ctx, 1, 100, 0), "unfenced: nothing is checked")

	a, err := s.Audit(ctx)
	require.NoError(t, err)
	assert.Equal(t, Audit{Shipments: 2, Orders: 1, Duplicates: 1, Taken: 2}, a)
	require.NoError(t, s.Close())
	var n int
	require.NoError(t, db.QueryRow("SELECT count(*) FROM sqlite_master WHERE type = 'table'").Scan(&n))
	assert.Zero(t, n)
}

// TestMeasureCost: every timed call is counted, the guarded calls refuse nothing, and the
// store holds one shipment per call.
func TestMeasureCost(t *testing.T) {
	ctx := context.Background()
	for name, store := range map[string]Store{
		"memory": NewMemoryStore(),
		"sqlite": NewSQLStore(sqliteDB(t), sqlfence.SQLite, "cost"),
	} {
		t.Run(name, func(t *testing.T) {
			c, err := MeasureCost(ctx, store, 3, 40)
			require.NoError(t, err)
			assert.Equal(t, 40, c.Samples)
			for _, l := range []Latency{c.Claim.Unguarded, c.Claim.Guarded, c.Write.Unguarded, c.Write.Guarded} {
				assert.Positive(t, l.P50us)
				assert.GreaterOrEqual(t, l.P99us, l.P50us)
				assert.Positive(t, l.PerSecond)
			}
			a, err := store.Audit(ctx)
			require.NoError(t, err)
			assert.Equal(t, int64(2*(40+10)), a.Shipments, "10 untimed jobs first, each kind")
			assert.Zero(t, a.Duplicates)
		})
	}
	_, err := MeasureCost(ctx, NewMemoryStore(), 0, 10)
	assert.Error(t, err)
}

func TestLatency(t *testing.T) {
	ds := make([]time.Duration, 100)
	for i := range ds {
		ds[i] = time.Duration(100-i) * time.Microsecond // 100 µs down to 1 µs
	}
	l := latency(ds)
	assert.Equal(t, 50.0, l.P50us)
	assert.Equal(t, 99.0, l.P99us)
	assert.InDelta(t, 100/(5050e-6), l.PerSecond, 0.01)
	assert.Equal(t, Latency{}, latency(nil))
}
