package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/fence"
	"quorumlock.dev/fence/sqlfence"
)

// fragments writes the ? placeholders of set and where as d's: for PostgreSQL, $1, $2...
// numbered across both, set's first.
func (d database) fragments(set, where string) (string, string) {
	if d.dialect != sqlfence.PostgreSQL {
		return set, where
	}
	both := d.q(set + "\x00" + where)
	set, where, _ = strings.Cut(both, "\x00")
	return set, where
}

// inventory creates, on a handle of d, a table of stock with one row (sku WH-01, qty 10,
// fence 0), and returns the handle and a guard of the table.
func inventory(t *testing.T, d database, g sqlfence.Guard) (*sql.DB, sqlfence.Guard) {
	t.Helper()
	db := d.open(t)
	g.Dialect, g.Table = d.dialect, "stock_"+strings.TrimPrefix(d.table(t, db, g.Compare).Table, "records_")
	_, err := db.ExecContext(t.Context(), "CREATE TABLE "+g.Table+" (sku VARCHAR(32) PRIMARY KEY, qty INT NOT NULL)")
	require.NoError(t, err)
	migration, err := g.Migration()
	require.NoError(t, err)
	_, err = db.ExecContext(t.Context(), migration)
	require.NoError(t, err)
	_, err = db.ExecContext(t.Context(), "INSERT INTO "+g.Table+" (sku, qty) VALUES ('WH-01', 10)")
	require.NoError(t, err)
	return db, g
}

// row returns qty and fence of a stock row.
func row(t *testing.T, d database, db sqlfence.DB, g sqlfence.Guard, sku string) (qty int, stored int64) {
	t.Helper()
	require.NoError(t, db.QueryRowContext(t.Context(), d.q("SELECT qty, fence FROM "+g.Table+" WHERE sku = ?"), sku).Scan(&qty, &stored))
	return qty, stored
}

// update runs g.Update with the fragments written for d.
func update(t *testing.T, d database, db sqlfence.DB, g sqlfence.Guard, token uint64, set, where string, args ...any) (int64, error) {
	t.Helper()
	set, where = d.fragments(set, where)
	return g.Update(t.Context(), db, token, set, where, args...)
}

// TestGuardClaim: a claim raises the fence alone, so that a stale holder's write after it is
// refused, and told to OnReject once; claiming again with the same fence is no refusal,
// also where MySQL counts rows changed rather than matched. Not parallel: it counts
// fence.Rejected.
func TestGuardClaim(t *testing.T) {
	for _, d := range databases(t) {
		t.Run(d.name, func(t *testing.T) {
			var told atomic.Int64
			db, g := inventory(t, d, sqlfence.Guard{OnReject: func() { told.Add(1) }})
			ctx := t.Context()
			claim := func(token uint64, sku string) (int64, error) {
				_, where := d.fragments("", "sku = ?")
				return g.Claim(ctx, db, token, where, sku)
			}

			for range 2 {
				n, err := claim(42, "WH-01")
				require.NoError(t, err, "a claim, and the same claim again")
				assert.Equal(t, int64(1), n)
			}
			qty, stored := row(t, d, db, g, "WH-01")
			assert.Equal(t, 10, qty, "a claim changes nothing but the fence")
			assert.Equal(t, int64(42), stored)

			before := fence.Rejected()
			_, err := update(t, d, db, g, 41, "qty = ?", "sku = ?", 1, "WH-01")
			require.ErrorIs(t, err, fence.ErrFenceRejected, "the stale write after the claim")
			assert.Contains(t, err.Error(), "stores fence 42, offered 41")
			_, err = claim(41, "WH-01")
			require.ErrorIs(t, err, fence.ErrFenceRejected, "a stale claim")
			assert.Equal(t, before+2, fence.Rejected())
			assert.Equal(t, int64(2), told.Load(), "each refusal told to OnReject once")

			for _, qty := range []int{9, 9} {
				n, err := update(t, d, db, g, 42, "qty = ?", "sku = ?", qty, "WH-01")
				require.NoError(t, err, "the claimant writes with its own fence, twice the same value")
				assert.Equal(t, int64(1), n)
			}
			qty, _ = row(t, d, db, g, "WH-01")
			assert.Equal(t, 9, qty)

			_, err = claim(43, "WH-99")
			assert.ErrorIs(t, err, sqlfence.ErrNoRow)
			g.Compare = fence.Newer
			_, err = claim(50, "WH-01")
			assert.ErrorIs(t, err, fence.ErrInvalidArgument)
			assert.Equal(t, before+2, fence.Rejected())
		})
	}
}

// TestGuardRows: each row is checked on its own, the count is of rows written, and the
// fragments may hold placeholders in one of them, or none; a trailing comment in a fragment
// does not swallow the guard's check.
func TestGuardRows(t *testing.T) {
	for _, d := range databases(t) {
		t.Run(d.name, func(t *testing.T) {
			db, g := inventory(t, d, sqlfence.Guard{})
			ctx := t.Context()
			_, err := db.ExecContext(ctx, "INSERT INTO "+g.Table+" (sku, qty, fence) VALUES ('WH-02', 10, 0), ('WH-03', 10, 9)")
			require.NoError(t, err)

			n, err := update(t, d, db, g, 5, "qty = qty - ?", "sku LIKE ?", 1, "WH-%")
			require.NoError(t, err)
			assert.Equal(t, int64(2), n, "WH-03 stores fence 9")
			qty, stored := row(t, d, db, g, "WH-03")
			assert.Equal(t, 10, qty)
			assert.Equal(t, int64(9), stored)

			n, err = update(t, d, db, g, 9, "qty = 0", "sku = ?", "WH-03")
			require.NoError(t, err)
			assert.Equal(t, int64(1), n)
			n, err = update(t, d, db, g, 10, "qty = ?", "sku = 'WH-03'", 4)
			require.NoError(t, err)
			assert.Equal(t, int64(1), n)
			n, err = update(t, d, db, g, 11, "qty = qty + 1", "1 = 1")
			require.NoError(t, err)
			assert.Equal(t, int64(3), n)

			n, err = update(t, d, db, g, 12, "qty = ? -- restock", "sku = ? -- one row", 50, "WH-01")
			require.NoError(t, err)
			assert.Equal(t, int64(1), n)
			_, err = update(t, d, db, g, 11, "qty = ? -- restock", "sku = ? -- one row", 60, "WH-01")
			require.ErrorIs(t, err, fence.ErrFenceRejected)
			qty, _ = row(t, d, db, g, "WH-01")
			assert.Equal(t, 50, qty)
		})
	}
}

// TestGuardHandles: the guard runs on a *sql.Conn and in a *sql.Tx, whose rollback undoes its
// write, and a refusal leaves the transaction usable. Not parallel: it counts fence.Rejected.
func TestGuardHandles(t *testing.T) {
	for _, d := range databases(t) {
		t.Run(d.name, func(t *testing.T) {
			db, g := inventory(t, d, sqlfence.Guard{})
			ctx := t.Context()

			conn, err := db.Conn(ctx)
			require.NoError(t, err)
			_, err = update(t, d, conn, g, 5, "qty = ?", "sku = ?", 4, "WH-01")
			require.NoError(t, err)
			require.NoError(t, conn.Close())

			tx, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			defer tx.Rollback()
			_, err = update(t, d, tx, g, 6, "qty = ?", "sku = ?", 3, "WH-01")
			require.NoError(t, err)
			_, err = update(t, d, tx, g, 5, "qty = ?", "sku = ?", 2, "WH-01")
			require.ErrorIs(t, err, fence.ErrFenceRejected, "the transaction's own write raised the fence")
			qty, stored := row(t, d, tx, g, "WH-01")
			assert.Equal(t, 3, qty, "the transaction is still usable")
			assert.Equal(t, int64(6), stored)
			require.NoError(t, tx.Rollback())
			qty, stored = row(t, d, db, g, "WH-01")
			assert.Equal(t, 4, qty, "rolled back")
			assert.Equal(t, int64(5), stored)
		})
	}
}

// TestGuardNullFence: a nullable fence column is a misconfiguration, reported as such and not
// counted as a rejection. Not parallel: it counts fence.Rejected.
func TestGuardNullFence(t *testing.T) {
	for _, d := range databases(t) {
		t.Run(d.name, func(t *testing.T) {
			db := d.open(t)
			loose := fmt.Sprintf("loose_%d", tables.Add(1))
			_, err := db.ExecContext(t.Context(), "CREATE TABLE "+loose+" (id INT PRIMARY KEY, v INT, fence BIGINT)")
			require.NoError(t, err)
			_, err = db.ExecContext(t.Context(), "INSERT INTO "+loose+" VALUES (1, 0, NULL)")
			require.NoError(t, err)
			before := fence.Rejected()
			_, err = update(t, d, db, sqlfence.Guard{Dialect: d.dialect, Table: loose}, 5, "v = ?", "id = ?", 1, 1)
			require.Error(t, err)
			assert.NotErrorIs(t, err, fence.ErrFenceRejected)
			assert.NotErrorIs(t, err, sqlfence.ErrNoRow)
			assert.Contains(t, err.Error(), "NULL")
			assert.Equal(t, before, fence.Rejected())
		})
	}
}

// TestGuardFenceNeverLowered: a SET that assigns the fence column itself cannot lower it:
// MySQL runs the assignments in order and SQLite keeps the last one, and the guard's comes
// last; PostgreSQL refuses two assignments.
func TestGuardFenceNeverLowered(t *testing.T) {
	for _, d := range databases(t) {
		t.Run(d.name, func(t *testing.T) {
			db, g := inventory(t, d, sqlfence.Guard{})
			_, err := update(t, d, db, g, 42, "qty = ?, fence = 0", "sku = ?", 6, "WH-01")
			if d.dialect == sqlfence.PostgreSQL {
				require.Error(t, err)
				assert.Contains(t, err.Error(), "multiple assignments")
			} else {
				require.NoError(t, err)
			}
			qty, stored := row(t, d, db, g, "WH-01")
			if d.dialect == sqlfence.PostgreSQL {
				assert.Equal(t, 10, qty, "nothing written")
				assert.Equal(t, int64(0), stored, "nothing written")
			} else {
				assert.Equal(t, 6, qty)
				assert.Equal(t, int64(42), stored, "the SET's own assignment of the fence won")
			}
		})
	}
}

// changer is a DB on which something else changes the table right after each statement the
// guard runs: the fault that sits between MySQL's and SQLite's UPDATE and the read that says
// why it changed nothing.
type changer struct {
	sqlfence.DB
	after func()
}

func (c changer) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	res, err := c.DB.ExecContext(ctx, query, args...)
	c.after()
	return res, err
}

// TestGuardChangedBetweenStatements: on MySQL and SQLite, a row that starts to match after the
// update changed nothing is a conflict to retry when it admits the fence, a rejection when it
// holds a newer one; a row that holds the offered fence counts as written on MySQL, which
// cannot tell it from a row the update matched and left as it was (docs/fencing.md). Not
// parallel: it counts fence.Rejected.
func TestGuardChangedBetweenStatements(t *testing.T) {
	for _, d := range databases(t) {
		if d.dialect == sqlfence.PostgreSQL {
			continue // one statement
		}
		t.Run(d.name, func(t *testing.T) {
			db, g := inventory(t, d, sqlfence.Guard{})
			ctx := t.Context()
			arrive := func(stored int) changer {
				return changer{db, func() {
					_, err := db.ExecContext(ctx, d.q("INSERT INTO "+g.Table+" (sku, qty, fence) VALUES ('WH-09', 1, ?)"), stored)
					require.NoError(t, err)
				}}
			}
			for _, c := range []struct {
				stored int
				want   error // nil: written
			}{
				{0, sqlfence.ErrConflict},
				{8, sqlfence.ErrConflict},
				{9, sqlfence.ErrConflict}, // MySQL: written
				{10, fence.ErrFenceRejected},
			} {
				before := fence.Rejected()
				_, err := update(t, d, arrive(c.stored), g, 9, "qty = ?", "sku = ?", 5, "WH-09")
				want := c.want
				if c.stored == 9 && d.dialect == sqlfence.MySQL {
					want = nil
				}
				if want == nil {
					assert.NoError(t, err, "a row arrived holding the fence offered")
				} else {
					assert.ErrorIs(t, err, want, "a row arrived holding fence %d", c.stored)
				}
				if want == fence.ErrFenceRejected {
					assert.Equal(t, before+1, fence.Rejected())
				} else {
					assert.Equal(t, before, fence.Rejected())
				}
				_, err = db.ExecContext(ctx, "DELETE FROM "+g.Table+" WHERE sku = 'WH-09'")
				require.NoError(t, err)
			}
		})
	}
}

func TestGuardContext(t *testing.T) {
	for _, d := range databases(t) {
		t.Run(d.name, func(t *testing.T) {
			db, g := inventory(t, d, sqlfence.Guard{})
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			set, where := d.fragments("qty = ?", "sku = ?")
			_, err := g.Update(ctx, db, 1, set, where, 1, "WH-01")
			assert.ErrorIs(t, err, context.Canceled)
			qty, _ := row(t, d, db, g, "WH-01")
			assert.Equal(t, 10, qty)
		})
	}
}

// unreachable is a DB that fails the test when used.
type unreachable struct{ t *testing.T }

func (u unreachable) ExecContext(context.Context, string, ...any) (sql.Result, error) {
	u.t.Error("ExecContext called")
	return nil, errors.New("unreachable")
}

func (u unreachable) QueryRowContext(context.Context, string, ...any) *sql.Row {
	u.t.Error("QueryRowContext called")
	return nil
}

// TestGuardInvalid: bad input is fence.ErrInvalidArgument, and nothing is sent.
func TestGuardInvalid(t *testing.T) {
	t.Parallel()
	my := sqlfence.Guard{Dialect: sqlfence.MySQL, Table: "inventory"}
	lite := sqlfence.Guard{Dialect: sqlfence.SQLite, Table: "inventory"}
	pg := sqlfence.Guard{Dialect: sqlfence.PostgreSQL, Table: "inventory"}
	with := func(g sqlfence.Guard, change func(*sqlfence.Guard)) sqlfence.Guard {
		change(&g)
		return g
	}
	const set, where = "qty = ?", "sku = ?"
	tests := []struct {
		name       string
		g          sqlfence.Guard
		db         sqlfence.DB
		token      uint64
		set, where string
	}{
		{"no dialect", with(my, func(g *sqlfence.Guard) { g.Dialect = 0 }), nil, 1, set, where},
		{"unknown dialect", with(my, func(g *sqlfence.Guard) { g.Dialect = 9 }), nil, 1, set, where},
		{"unknown comparison", with(my, func(g *sqlfence.Guard) { g.Compare = 7 }), nil, 1, set, where},
		{"nil db", my, nil, 1, set, where},
		{"typed nil db", my, (*sql.DB)(nil), 1, set, where},
		{"empty table", with(my, func(g *sqlfence.Guard) { g.Table = "" }), nil, 1, set, where},
		{"empty schema", with(my, func(g *sqlfence.Guard) { g.Table = ".inventory" }), nil, 1, set, where},
		{"three parts", with(my, func(g *sqlfence.Guard) { g.Table = "a.b.c" }), nil, 1, set, where},
		{"table that needs quoting", with(my, func(g *sqlfence.Guard) { g.Table = "in ventory" }), nil, 1, set, where},
		{"table with a backtick", with(my, func(g *sqlfence.Guard) { g.Table = "inventory` --" }), nil, 1, set, where},
		{"table starting with a digit", with(my, func(g *sqlfence.Guard) { g.Table = "1nventory" }), nil, 1, set, where},
		{"non-ASCII table", with(my, func(g *sqlfence.Guard) { g.Table = "inventär" }), nil, 1, set, where},
		{"NUL in the table", with(my, func(g *sqlfence.Guard) { g.Table = "inven\x00tory" }), nil, 1, set, where},
		{"table past 63 bytes", with(my, func(g *sqlfence.Guard) { g.Table = strings.Repeat("t", 64) }), nil, 1, set, where},
		{"column that needs quoting", with(my, func(g *sqlfence.Guard) { g.FenceColumn = "fence token" }), nil, 1, set, where},
		{"empty set", my, nil, 1, " ", where},
		{"empty where", my, nil, 1, set, " "},
		{"where escaping its parentheses", my, nil, 1, set, "sku = ?) OR (sku = ?"},
		{"where with a separator", lite, nil, 1, set, "sku = ?; DELETE FROM inventory"},
		{"where leaving a string open", pg, nil, 1, "qty = $1", "sku = '"},
		{"set escaping its parentheses", lite, nil, 1, "qty = (?)) + 0", where},
		{"backslash in a MySQL string", my, nil, 1, set, `sku = ? AND note <> '\'`},
		{"MySQL executable comment", my, nil, 1, set, "sku = ? /*! OR 1 */"},
		{"named SQLite parameter", lite, nil, 1, set, "sku = :sku"},
		{"numbered SQLite parameter", lite, nil, 1, set, "sku = ?2"},
		{"placeholders for fewer values", my, nil, 1, "qty = ?, note = ?", where},
		{"fence 0", my, nil, 0, set, where},
		{"fence above BIGINT", my, nil, math.MaxInt64 + 1, set, where},
		{"largest fence", pg, nil, math.MaxUint64, "qty = $1", "sku = $2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := tt.db
			if db == nil && tt.name != "nil db" {
				db = unreachable{t}
			}
			n, err := tt.g.Update(t.Context(), db, tt.token, tt.set, tt.where, 1, "WH-01")
			assert.ErrorIs(t, err, fence.ErrInvalidArgument)
			assert.Zero(t, n)
			assert.Less(t, len(err.Error()), 400)
		})
	}
	_, err := sqlfence.Guard{Dialect: sqlfence.MySQL}.Migration()
	assert.ErrorIs(t, err, fence.ErrInvalidArgument, "Migration of a guard without a table")
}

func TestGuardMigration(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		g    sqlfence.Guard
		want string
	}{
		{sqlfence.Guard{Dialect: sqlfence.PostgreSQL, Table: "inventory"},
			`ALTER TABLE "inventory" ADD COLUMN IF NOT EXISTS "fence" bigint NOT NULL DEFAULT 0`},
		{sqlfence.Guard{Dialect: sqlfence.PostgreSQL, Table: "shop.Stock", FenceColumn: "token"},
			`ALTER TABLE "shop"."Stock" ADD COLUMN IF NOT EXISTS "token" bigint NOT NULL DEFAULT 0`},
		{sqlfence.Guard{Dialect: sqlfence.MySQL, Table: "inventory"},
			"ALTER TABLE `inventory` ADD COLUMN `fence` BIGINT NOT NULL DEFAULT 0"},
		{sqlfence.Guard{Dialect: sqlfence.MySQL, Table: "shop.order", FenceColumn: "fence_token"},
			"ALTER TABLE `shop`.`order` ADD COLUMN `fence_token` BIGINT NOT NULL DEFAULT 0"},
		{sqlfence.Guard{Dialect: sqlfence.SQLite, Table: "inventory"},
			`ALTER TABLE "inventory" ADD COLUMN "fence" INTEGER NOT NULL DEFAULT 0`},
	} {
		got, err := tt.g.Migration()
		require.NoError(t, err)
		assert.Equal(t, tt.want, got)
	}
	assert.Equal(t, "MySQL", sqlfence.MySQL.String())
	assert.Equal(t, "Dialect(0)", sqlfence.Dialect(0).String())
}

// TestImportsNoDriver: the package links no SQL driver and no pgx; the program chooses its
// own.
func TestImportsNoDriver(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "quorumlock.dev/fence/sqlfence").Output()
	require.NoError(t, err)
	for _, dep := range strings.Fields(string(out)) {
		for _, driver := range []string{"github.com/go-sql-driver/", "modernc.org/", "github.com/jackc/", "github.com/redis/"} {
			assert.False(t, strings.HasPrefix(dep, driver), "sqlfence imports %s", dep)
		}
	}
	assert.Contains(t, strings.Fields(string(out)), "database/sql")
}
