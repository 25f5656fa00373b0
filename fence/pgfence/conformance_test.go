package pgfence_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/fence"
	"quorumlock.dev/fence/fencetest"
	"quorumlock.dev/fence/pgfence"
	"quorumlock.dev/internal/harness/pgtest"
)

// TestConformance runs the guards' conformance kit on Guard. Not parallel: the kit counts
// fence.Rejected.
func TestConformance(t *testing.T) {
	dsn := pgtest.NewDatabase(t, pgtest.Shared(t))
	fencetest.Run(t, func(t *testing.T, compare fence.Comparison) fencetest.Store {
		return newStore(t, dsn, compare)
	})
}

// store is Guard as the kit sees it: record id is the row whose id column holds it, in a
// table of its own.
type store struct {
	t     *testing.T
	dsn   string
	pool  *pgxpool.Pool
	guard pgfence.Guard
}

var (
	_ fencetest.Conflicter = (*store)(nil)
	_ fencetest.Renamer    = (*store)(nil)
)

var tables atomic.Int64

func newStore(t *testing.T, dsn string, compare fence.Comparison) *store {
	s := &store{t: t, dsn: dsn, pool: pgtest.Pool(t, dsn),
		guard: pgfence.Guard{Table: fmt.Sprintf("records_%d", tables.Add(1)), Compare: compare}}
	_, err := s.pool.Exec(t.Context(), "CREATE TABLE "+s.guard.Table+" (id text PRIMARY KEY, value text NOT NULL DEFAULT '')")
	require.NoError(t, err)
	_, err = s.pool.Exec(t.Context(), s.guard.Migration())
	require.NoError(t, err)
	return s
}

func (s *store) Insert(ctx context.Context, id string) error {
	_, err := s.pool.Exec(ctx, "INSERT INTO "+s.guard.Table+" (id) VALUES ($1)", id)
	return err
}

func (s *store) Write(ctx context.Context, id, value string, f uint64) error {
	return s.write(ctx, s.pool, id, value, f)
}

func (s *store) write(ctx context.Context, db pgfence.DB, id, value string, f uint64) error {
	n, err := s.guard.Update(ctx, db, f, "value = $1", "id = $2", value, id)
	if err == nil && n != 1 {
		return fmt.Errorf("changed %d rows, want 1", n)
	}
	return err
}

func (s *store) Read(ctx context.Context, id string) (string, uint64, error) {
	var (
		value  string
		stored int64
	)
	err := s.pool.QueryRow(ctx, "SELECT value, fence FROM "+s.guard.Table+" WHERE id = $1", id).Scan(&value, &stored)
	return value, uint64(stored), err
}

func (s *store) Process(t *testing.T) fencetest.Store {
	other := *s
	other.t, other.pool = t, pgtest.Pool(t, s.dsn)
	return &other
}

func (s *store) MaxFence() uint64 { return math.MaxInt64 }

func (s *store) Names() (string, string) { return s.guard.Table, "fence" }

func (s *store) Rename(table, column string) fencetest.Store {
	other := *s
	other.guard.Table, other.guard.FenceColumn = table, column
	return &other
}

// WriteWhileDeleted deletes the row in a transaction, writes from another pool, and commits
// once the write waits for the row.
func (s *store) WriteWhileDeleted(ctx context.Context, id, value string, f uint64) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, "DELETE FROM "+s.guard.Table+" WHERE id = $1", id); err != nil {
		return err
	}
	writer := pgtest.Pool(s.t, s.dsn)
	done := make(chan error, 1)
	go func() { done <- s.write(ctx, writer, id, value, f) }()
	deadline := time.Now().Add(10 * time.Second)
	for waiting := 0; waiting == 0; time.Sleep(5 * time.Millisecond) {
		err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
		if err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return errors.New("the guarded update never waited for the row")
		}
		select {
		case err := <-done:
			return fmt.Errorf("the guarded update returned before it waited for the row: %v", err)
		default:
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	return <-done
}

// Retryable: a row deleted while the update waited for it is ErrConflict.
func (s *store) Retryable(err error) bool { return errors.Is(err, pgfence.ErrConflict) }
