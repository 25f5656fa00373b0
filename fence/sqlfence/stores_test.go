package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // "mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // "pgx"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite" // "sqlite"

	"quorumlock.dev/fence"
	"quorumlock.dev/fence/fencetest"
	"quorumlock.dev/fence/sqlfence"
	"quorumlock.dev/internal/harness/mariadbserver/mariadbtest"
	"quorumlock.dev/internal/harness/pgtest"
)

// TestMain stops the MariaDB and PostgreSQL servers that the tests of this package share.
func TestMain(m *testing.M) {
	code := m.Run()
	for _, stop := range []func() error{mariadbtest.StopShared, pgtest.StopShared} {
		if err := stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// database is a fresh database of one store, reached through database/sql.
type database struct {
	name    string
	dialect sqlfence.Dialect
	driver  string
	dsn     string
}

// databases returns a fresh database on each store: MariaDB as go-sql-driver/mysql reaches it
// by default and with clientFoundRows=true (rows matched, not rows changed), SQLite in a file
// (WAL, so that two handles can write it), and PostgreSQL through pgx's stdlib.
func databases(t *testing.T) []database {
	t.Helper()
	maria := mariadbtest.NewDatabase(t, mariadbtest.Shared(t))
	lite := "file:" + filepath.Join(t.TempDir(), "guard.db") +
		"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
	return []database{
		{"MariaDB", sqlfence.MySQL, "mysql", maria},
		{"MariaDB,clientFoundRows", sqlfence.MySQL, "mysql", maria + "?clientFoundRows=true"},
		{"SQLite", sqlfence.SQLite, "sqlite", lite},
		{"PostgreSQL", sqlfence.PostgreSQL, "pgx", pgtest.NewDatabase(t, pgtest.Shared(t))},
	}
}

// open returns a handle on d, closed when t ends.
func (d database) open(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open(d.driver, d.dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, db.PingContext(t.Context()))
	return db
}

// q writes the ? placeholders of query as d's: $1, $2... for PostgreSQL.
func (d database) q(query string) string {
	if d.dialect != sqlfence.PostgreSQL {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

var tables atomic.Int64

// table creates a table of records (id, value) on db and adds the fence column with the
// guard's Migration; it returns the guard.
func (d database) table(t *testing.T, db *sql.DB, compare fence.Comparison) sqlfence.Guard {
	t.Helper()
	g := sqlfence.Guard{Dialect: d.dialect, Table: fmt.Sprintf("records_%d", tables.Add(1)), Compare: compare}
	_, err := db.ExecContext(t.Context(), "CREATE TABLE "+g.Table+" (id VARCHAR(64) PRIMARY KEY, value VARCHAR(255) NOT NULL DEFAULT '')")
	require.NoError(t, err)
	migration, err := g.Migration()
	require.NoError(t, err)
	_, err = db.ExecContext(t.Context(), migration)
	require.NoError(t, err, migration)
	return g
}

// store is sqlfence.Guard as the conformance kit sees it: record id is the row whose id
// column holds it, in a table of its own.
type store struct {
	t     *testing.T
	d     database
	db    *sql.DB
	guard sqlfence.Guard
}

func newStore(t *testing.T, d database, compare fence.Comparison) *store {
	db := d.open(t)
	return &store{t: t, d: d, db: db, guard: d.table(t, db, compare)}
}

var (
	_ fencetest.Conflicter = (*store)(nil)
	_ fencetest.Renamer    = (*store)(nil)
)

func (s *store) Insert(ctx context.Context, id string) error {
	_, err := s.db.ExecContext(ctx, s.d.q("INSERT INTO "+s.guard.Table+" (id) VALUES (?)"), id)
	return err
}

func (s *store) Write(ctx context.Context, id, value string, f uint64) error {
	return s.write(ctx, s.db, id, value, f)
}

func (s *store) write(ctx context.Context, db sqlfence.DB, id, value string, f uint64) error {
	set, where := "value = ?", "id = ?"
	if s.d.dialect == sqlfence.PostgreSQL {
		set, where = "value = $1", "id = $2"
	}
	n, err := s.guard.Update(ctx, db, f, set, where, value, id)
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
	err := s.db.QueryRowContext(ctx, s.d.q("SELECT value, fence FROM "+s.guard.Table+" WHERE id = ?"), id).Scan(&value, &stored)
	return value, uint64(stored), err
}

func (s *store) Process(t *testing.T) fencetest.Store {
	other := *s
	other.t, other.db = t, s.d.open(t)
	return &other
}

func (s *store) MaxFence() uint64 { return math.MaxInt64 }

func (s *store) Names() (string, string) { return s.guard.Table, "fence" }

func (s *store) Rename(table, column string) fencetest.Store {
	other := *s
	other.guard.Table, other.guard.FenceColumn = table, column
	return &other
}

// WriteWhileDeleted deletes the row in a transaction, writes from another connection, and
// commits once the write waits for the row: on MariaDB and PostgreSQL when the server shows
// it waiting for a lock, on SQLite (which shows no waiting) after 50 ms.
func (s *store) WriteWhileDeleted(ctx context.Context, id, value string, f uint64) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, s.d.q("DELETE FROM "+s.guard.Table+" WHERE id = ?"), id); err != nil {
		return err
	}
	writer := s.d.open(s.t)
	done := make(chan error, 1)
	go func() { done <- s.write(ctx, writer, id, value, f) }()
	if err := s.waitForLockWaiter(ctx, done); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		return errors.New("the guarded update did not return after the commit")
	}
}

// waitForLockWaiter returns once a session of the server waits for a row lock, or with an
// error once the write (done) returned without having waited.
func (s *store) waitForLockWaiter(ctx context.Context, done <-chan error) error {
	var query string
	poll := 5 * time.Millisecond
	switch s.d.dialect {
	case sqlfence.MySQL:
		query = "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT'"
		// InnoDB refreshes the table only when nobody read it for 100 ms: a faster poll
		// would read a stale copy for ever.
		poll = 150 * time.Millisecond
	case sqlfence.PostgreSQL:
		query = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
	default:
		time.Sleep(50 * time.Millisecond)
		return nil
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(poll) {
		var n int
		if err := s.db.QueryRowContext(ctx, query).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
		select {
		case err := <-done:
			return fmt.Errorf("the guarded update returned before it waited for the row: %v", err)
		default:
		}
	}
	return errors.New("the guarded update never waited for the row")
}

// Retryable: PostgreSQL tells a row changed while the update waited (ErrConflict); MySQL and
// SQLite see the row gone (ErrNoRow).
func (s *store) Retryable(err error) bool {
	return errors.Is(err, sqlfence.ErrConflict) || errors.Is(err, sqlfence.ErrNoRow)
}

// TestConformance runs the guards' conformance kit on each store. Not parallel: the kit counts
// fence.Rejected.
func TestConformance(t *testing.T) {
	for _, d := range databases(t) {
		t.Run(d.name, func(t *testing.T) {
			fencetest.Run(t, func(t *testing.T, compare fence.Comparison) fencetest.Store {
				return newStore(t, d, compare)
			})
		})
	}
}
