package pgfence

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/fence"
	"quorumlock.dev/fence/internal/mintertest"
	"quorumlock.dev/internal/harness/pgtest"
)

//go:embed schema.sql
var schemaSQL string

// TestMain stops the PostgreSQL server that the tests of this package share.
func TestMain(m *testing.M) {
	code := m.Run()
	if err := pgtest.StopShared(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

// pgDatabase returns a pool on a fresh database of the shared server, with schema.sql applied.
func pgDatabase(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.Pool(t, pgtest.NewDatabase(t, pgtest.Shared(t)))
	_, err := pool.Exec(t.Context(), schemaSQL)
	require.NoError(t, err)
	return pool
}

func newCounter(t *testing.T) (*pgxpool.Pool, *Counter) {
	t.Helper()
	pool := pgDatabase(t)
	c, err := NewCounter(pool)
	require.NoError(t, err)
	return pool, c
}

func TestSchemaIdempotent(t *testing.T) {
	t.Parallel()
	pool := pgDatabase(t)
	ctx := t.Context()
	_, err := pool.Exec(ctx, schemaSQL)
	require.NoError(t, err, "schema.sql twice")
	_, err = pool.Exec(ctx, Schema)
	require.NoError(t, err, "Schema after schema.sql")
	_, err = pool.Exec(ctx, Guard{Table: "inventory"}.Migration())
	require.NoError(t, err, "Migration after schema.sql")

	_, err = pool.Exec(ctx, "INSERT INTO quorumlock_fence VALUES ('a:1', 0)")
	require.Error(t, err, "the counter table refuses a value that is no fence")
}

func TestCounterMint(t *testing.T) {
	t.Parallel()
	pool, c := newCounter(t)
	ctx := t.Context()
	for want := uint64(1); want <= 5; want++ {
		got, err := c.Mint(ctx, "alloc:WH-01")
		require.NoError(t, err)
		assert.Equal(t, want, got)
	}
	var stored int64
	require.NoError(t, pool.QueryRow(ctx, "SELECT value FROM quorumlock_fence WHERE resource = 'alloc:WH-01'").Scan(&stored))
	assert.Equal(t, int64(5), stored)
	other, err := c.Mint(ctx, "alloc:WH-02")
	require.NoError(t, err)
	assert.Equal(t, uint64(1), other, "each resource has its own counter")

	last, ok, err := c.Last(ctx, "alloc:WH-01")
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, uint64(5), last, "Last reads the last fence minted")
	_, ok, err = c.Last(ctx, "alloc:WH-03")
	require.NoError(t, err)
	assert.False(t, ok, "no row: no fence yet")
	next, err := c.Mint(ctx, "alloc:WH-01")
	require.NoError(t, err)
	assert.Equal(t, uint64(6), next, "Last minted")
}

// TestCounterConcurrent: concurrent mints never repeat a value and leave no gap when nothing
// fails.
func TestCounterConcurrent(t *testing.T) {
	t.Parallel()
	_, c := newCounter(t)
	const workers, each = 16, 50
	seen := mintertest.Concurrent(t, c, "invoice:42", workers, each)
	for v := uint64(1); v <= workers*each; v++ {
		assert.True(t, seen[v], "gap at %d", v)
	}
}

func TestCounterSeed(t *testing.T) {
	t.Parallel()
	_, c := newCounter(t)
	ctx := t.Context()
	mint := func(resource string) uint64 {
		t.Helper()
		v, err := c.Mint(ctx, resource)
		require.NoError(t, err)
		return v
	}

	require.NoError(t, c.Seed(ctx, "a:1", 100), "a resource never minted")
	assert.Equal(t, uint64(101), mint("a:1"))
	require.NoError(t, c.Seed(ctx, "a:1", 50), "a lower seed")
	assert.Equal(t, uint64(102), mint("a:1"), "Seed never lowers the counter")
	require.NoError(t, c.Seed(ctx, "a:1", 102), "the current value")
	assert.Equal(t, uint64(103), mint("a:1"))
	require.NoError(t, c.Seed(ctx, "a:1", 1000))
	assert.Equal(t, uint64(1001), mint("a:1"))

	require.NoError(t, c.Seed(ctx, "b:1", 0), "a seed of 0 changes nothing")
	assert.Equal(t, uint64(1), mint("b:1"))

	require.NoError(t, c.Seed(ctx, "c:1", math.MaxInt64), "the largest seed")
	_, err := c.Mint(ctx, "c:1")
	require.Error(t, err, "the counter cannot go past a bigint")
}

func TestCounterBadInput(t *testing.T) {
	t.Parallel()
	var typedNil *pgxpool.Pool
	_, err := NewCounter(nil)
	assert.ErrorIs(t, err, fence.ErrInvalidArgument)
	_, err = NewCounter(typedNil)
	assert.ErrorIs(t, err, fence.ErrInvalidArgument)

	_, c := newCounter(t)
	ctx := t.Context()
	_, err = c.Mint(ctx, "")
	assert.ErrorIs(t, err, fence.ErrInvalidArgument)
	assert.ErrorIs(t, c.Seed(ctx, "", 5), fence.ErrInvalidArgument)
	assert.ErrorIs(t, c.Seed(ctx, "a:1", math.MaxInt64+1), fence.ErrInvalidArgument)
	for _, bad := range []string{"a\nb", "nul\x00", strings.Repeat("x", 1<<20)} {
		_, err = c.Mint(ctx, bad)
		if assert.ErrorIs(t, err, fence.ErrInvalidArgument) {
			assert.Less(t, len(err.Error()), 200, "the error quotes the whole name")
		}
		assert.ErrorIs(t, c.Seed(ctx, bad, 5), fence.ErrInvalidArgument)
	}

	// A database without the counter table.
	bare, err := NewCounter(pgtest.Pool(t, pgtest.NewDatabase(t, pgtest.Shared(t))))
	require.NoError(t, err)
	_, err = bare.Mint(ctx, "a:1")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "quorumlock_fence")
}

// TestCounterRefusesTx: a counter inside a transaction would hand out
// again the values of a transaction that rolled back. A pgx.Tx is refused;
// a *pgx.Conn inside a transaction block cannot be told apart, and shows the
// failure the refusal prevents.
func TestCounterRefusesTx(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewDatabase(t, pgtest.Shared(t))
	pool := pgtest.Pool(t, dsn)
	ctx := t.Context()
	_, err := pool.Exec(ctx, schemaSQL)
	require.NoError(t, err)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.Background())
	c, err := NewCounter(tx)
	require.ErrorIs(t, err, fence.ErrInvalidArgument)
	assert.Nil(t, c)
	require.NoError(t, tx.Rollback(ctx))

	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	inBlock, err := NewCounter(conn)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "BEGIN")
	require.NoError(t, err)
	v, err := inBlock.Mint(ctx, "a:1")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "ROLLBACK")
	require.NoError(t, err)
	onPool, err := NewCounter(pool)
	require.NoError(t, err)
	again, err := onPool.Mint(ctx, "a:1")
	require.NoError(t, err)
	assert.Equal(t, v, again, "the rolled-back mint's value is handed out again")
}

func TestCounterContext(t *testing.T) {
	t.Parallel()
	pool, c := newCounter(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := c.Mint(ctx, "a:1")
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, c.Seed(ctx, "a:1", 5), context.Canceled)

	// A mint that waits for a row lock ends with its context, and the value it was about to
	// take is never handed out twice.
	v, err := c.Mint(t.Context(), "a:1")
	require.NoError(t, err)
	require.Equal(t, uint64(1), v)
	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	defer tx.Rollback(context.Background())
	_, err = tx.Exec(t.Context(), "SELECT value FROM quorumlock_fence WHERE resource = 'a:1' FOR UPDATE")
	require.NoError(t, err)
	ctx, cancel = context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.Mint(ctx, "a:1")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), time.Second)
	require.NoError(t, tx.Rollback(t.Context()))
	v, err = c.Mint(t.Context(), "a:1")
	require.NoError(t, err)
	assert.Greater(t, v, uint64(1))
}

// inventory returns a pool on a fresh database holding the inventory table of schema.sql, with
// one row: sku WH-01, qty 10, fence 0.
func inventory(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := pgDatabase(t)
	_, err := pool.Exec(t.Context(), "INSERT INTO inventory (sku, qty) VALUES ('WH-01', 10)")
	require.NoError(t, err)
	return pool
}

// row returns qty and fence of an inventory row.
func row(t *testing.T, db DB, sku string) (qty int, stored int64) {
	t.Helper()
	require.NoError(t, db.QueryRow(t.Context(), "SELECT qty, fence FROM inventory WHERE sku = $1", sku).Scan(&qty, &stored))
	return qty, stored
}

const (
	setQty   = "qty = $1"
	whereSKU = "sku = $2"
)

// TestGuardStaleHolder is the incident review's scenario: the holder of fence 41 pauses past its lease,
// the holder of fence 42 writes, and 41's late write is refused. Not parallel: it counts
// fence.Rejected.
func TestGuardStaleHolder(t *testing.T) {
	pool := inventory(t)
	ctx := t.Context()
	var told atomic.Int64
	g := Guard{Table: "inventory", OnReject: func() { told.Add(1) }}

	n, err := g.Update(ctx, pool, 41, setQty, whereSKU, 9, "WH-01")
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)
	n, err = g.Update(ctx, pool, 42, setQty, whereSKU, 8, "WH-01")
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)

	before := fence.Rejected()
	n, err = g.Update(ctx, pool, 41, setQty, whereSKU, 7, "WH-01")
	require.ErrorIs(t, err, fence.ErrFenceRejected)
	assert.Zero(t, n)
	assert.Contains(t, err.Error(), "stores fence 42, offered 41")
	assert.Equal(t, before+1, fence.Rejected())
	assert.Equal(t, int64(1), told.Load(), "one refusal, told to OnReject once")
	qty, stored := row(t, pool, "WH-01")
	assert.Equal(t, 8, qty, "the row is unchanged")
	assert.Equal(t, int64(42), stored)
}

// TestGuardComparison: fence.AtLeast admits the holder's fence again, fence.Newer once. Not parallel: it
// counts fence.Rejected.
func TestGuardComparison(t *testing.T) {
	for _, tt := range []struct {
		name       string
		compare    fence.Comparison
		secondOK   bool
		rejections uint64
	}{
		{"fence.AtLeast", fence.AtLeast, true, 0},
		{"fence.Newer", fence.Newer, false, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pool := inventory(t)
			g := Guard{Table: "inventory", Compare: tt.compare}
			_, err := g.Update(t.Context(), pool, 7, setQty, whereSKU, 1, "WH-01")
			require.NoError(t, err)

			before := fence.Rejected()
			_, err = g.Update(t.Context(), pool, 7, setQty, whereSKU, 2, "WH-01")
			qty, _ := row(t, pool, "WH-01")
			if tt.secondOK {
				require.NoError(t, err)
				assert.Equal(t, 2, qty)
			} else {
				require.ErrorIs(t, err, fence.ErrFenceRejected)
				assert.Equal(t, 1, qty)
			}
			assert.Equal(t, before+tt.rejections, fence.Rejected())
		})
	}
}

// TestGuardNoRow: a write to a row that does not exist is no rejection. Not parallel: it
// counts fence.Rejected.
func TestGuardNoRow(t *testing.T) {
	pool := inventory(t)
	before := fence.Rejected()
	told := false
	n, err := Guard{Table: "inventory", OnReject: func() { told = true }}.Update(t.Context(), pool, 5, setQty, whereSKU, 1, "WH-99")
	require.ErrorIs(t, err, ErrNoRow)
	assert.NotErrorIs(t, err, fence.ErrFenceRejected)
	assert.Zero(t, n)
	assert.Equal(t, before, fence.Rejected())
	assert.False(t, told, "OnReject heard of a write that matched no row")
}

// TestGuardNullFence: a nullable fence column is a misconfiguration, reported as such and
// not counted as a rejection. Not parallel: it counts fence.Rejected.
func TestGuardNullFence(t *testing.T) {
	pool := pgDatabase(t)
	_, err := pool.Exec(t.Context(), "CREATE TABLE loose (id int PRIMARY KEY, v int, fence bigint); INSERT INTO loose VALUES (1, 0, NULL)")
	require.NoError(t, err)
	before := fence.Rejected()
	_, err = Guard{Table: "loose"}.Update(t.Context(), pool, 5, "v = $1", "id = $2", 1, 1)
	require.Error(t, err)
	assert.NotErrorIs(t, err, fence.ErrFenceRejected)
	assert.NotErrorIs(t, err, ErrNoRow)
	assert.Contains(t, err.Error(), "NULL")
	assert.Equal(t, before, fence.Rejected())
}

// TestGuardRows: the count is of rows changed, and each row is checked on its own.
func TestGuardRows(t *testing.T) {
	t.Parallel()
	pool := inventory(t)
	ctx := t.Context()
	_, err := pool.Exec(ctx, "INSERT INTO inventory VALUES ('WH-02', 10, 0), ('WH-03', 10, 9)")
	require.NoError(t, err)
	g := Guard{Table: "inventory"}
	n, err := g.Update(ctx, pool, 5, "qty = qty - $1", "sku LIKE $2", 1, "WH-%")
	require.NoError(t, err)
	assert.Equal(t, int64(2), n, "WH-03 stores fence 9")
	qty, stored := row(t, pool, "WH-03")
	assert.Equal(t, 10, qty)
	assert.Equal(t, int64(9), stored)

	// Placeholders in where only, in set only, and none at all.
	n, err = g.Update(ctx, pool, 9, "qty = 0", "sku = $1", "WH-03")
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)
	n, err = g.Update(ctx, pool, 10, "qty = $1", "sku = 'WH-03'", 4)
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)
	n, err = g.Update(ctx, pool, 11, "qty = qty + 1", "true")
	require.NoError(t, err)
	assert.Equal(t, int64(3), n)

	// A trailing line comment in a fragment does not swallow the fence check.
	n, err = g.Update(ctx, pool, 12, "qty = $1 -- restock", "sku = $2 -- one row", 50, "WH-01")
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)
	_, err = g.Update(ctx, pool, 11, "qty = $1 -- restock", "sku = $2 -- one row", 60, "WH-01")
	require.ErrorIs(t, err, fence.ErrFenceRejected)
	qty, _ = row(t, pool, "WH-01")
	assert.Equal(t, 50, qty)
}

// TestGuardConcurrentNewer: writers racing with the same fence under fence.Newer: exactly one
// wins, whichever of them waited on the row lock is refused.
func TestGuardConcurrentNewer(t *testing.T) {
	t.Parallel()
	pool := inventory(t)
	g := Guard{Table: "inventory", Compare: fence.Newer}
	const writers = 8
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			_, err := g.Update(t.Context(), pool, 3, setQty, whereSKU, i, "WH-01")
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	var won int
	for err := range errs {
		if err == nil {
			won++
			continue
		}
		assert.ErrorIs(t, err, fence.ErrFenceRejected)
	}
	assert.Equal(t, 1, won)
	_, stored := row(t, pool, "WH-01")
	assert.Equal(t, int64(3), stored)
}

// TestGuardIdentifiers: names are quoted, so they keep their case, may be schema-qualified,
// and may hold characters SQL would otherwise read.
func TestGuardIdentifiers(t *testing.T) {
	t.Parallel()
	pool := pgDatabase(t)
	ctx := t.Context()
	_, err := pool.Exec(ctx, `CREATE TABLE "Stock" (sku text PRIMARY KEY, qty int);
CREATE SCHEMA shop; CREATE TABLE shop.stock (sku text PRIMARY KEY, qty int);
CREATE TABLE stock (sku text PRIMARY KEY, qty int);
INSERT INTO "Stock" VALUES ('a', 1); INSERT INTO shop.stock VALUES ('a', 1); INSERT INTO stock VALUES ('a', 1)`)
	require.NoError(t, err)

	for _, g := range []Guard{
		{Table: "Stock"},
		{Table: "shop.stock", FenceColumn: "Fence Token"},
	} {
		t.Run(g.Table, func(t *testing.T) {
			for range 2 {
				_, err := pool.Exec(ctx, g.Migration())
				require.NoError(t, err, "Migration is idempotent: %s", g.Migration())
			}
			n, err := g.Update(ctx, pool, 3, setQty, whereSKU, 2, "a")
			require.NoError(t, err)
			assert.Equal(t, int64(1), n)
		})
	}
	var qty int
	require.NoError(t, pool.QueryRow(ctx, `SELECT qty FROM "Stock"`).Scan(&qty))
	assert.Equal(t, 2, qty)
	var stored int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT qty, "Fence Token" FROM shop.stock`).Scan(&qty, &stored))
	assert.Equal(t, 2, qty)
	assert.Equal(t, int64(3), stored)
	require.NoError(t, pool.QueryRow(ctx, `SELECT qty FROM stock`).Scan(&qty))
	assert.Equal(t, 1, qty, "public.stock is another table")

	_, err = Guard{Table: "stock; DROP TABLE stock"}.Update(ctx, pool, 3, setQty, whereSKU, 2, "a")
	require.Error(t, err, "no such table")
	require.NoError(t, pool.QueryRow(ctx, `SELECT qty FROM stock`).Scan(&qty), "and the name ran as no SQL")
}

// TestGuardTx: the guard works inside a transaction, and a rejection leaves it usable.
func TestGuardTx(t *testing.T) {
	t.Parallel()
	pool := inventory(t)
	ctx := t.Context()
	g := Guard{Table: "inventory"}

	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := g.Update(ctx, tx, 5, setQty, whereSKU, 4, "WH-01")
		return err
	}))
	qty, stored := row(t, pool, "WH-01")
	assert.Equal(t, 4, qty)
	assert.Equal(t, int64(5), stored)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.Background())
	_, err = g.Update(ctx, tx, 6, setQty, whereSKU, 3, "WH-01")
	require.NoError(t, err)
	_, err = g.Update(ctx, tx, 5, setQty, whereSKU, 2, "WH-01")
	require.ErrorIs(t, err, fence.ErrFenceRejected, "the transaction's own write raised the fence")
	qty, stored = row(t, tx, "WH-01")
	assert.Equal(t, 3, qty, "the transaction is still usable")
	assert.Equal(t, int64(6), stored)
	require.NoError(t, tx.Rollback(ctx))
	qty, _ = row(t, pool, "WH-01")
	assert.Equal(t, 4, qty, "rolled back")
}

// unreachable is a DB that fails the test when used.
type unreachable struct{ t *testing.T }

func (u unreachable) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	u.t.Error("Exec called")
	return pgconn.CommandTag{}, errors.New("unreachable")
}

func (u unreachable) QueryRow(context.Context, string, ...any) pgx.Row {
	u.t.Error("QueryRow called")
	return nil
}

func TestGuardInvalid(t *testing.T) {
	t.Parallel()
	db := unreachable{t}
	inv := Guard{Table: "inventory"}
	tests := []struct {
		name       string
		g          Guard
		db         DB
		stored     uint64
		set, where string
	}{
		{"nil db", inv, nil, 1, setQty, whereSKU},
		{"empty table", Guard{}, db, 1, setQty, whereSKU},
		{"empty schema", Guard{Table: ".inventory"}, db, 1, setQty, whereSKU},
		{"empty table after schema", Guard{Table: "shop."}, db, 1, setQty, whereSKU},
		{"empty set", inv, db, 1, " ", whereSKU},
		{"empty where", inv, db, 1, setQty, ""},
		{"where escaping its parentheses", inv, db, 1, setQty, "sku = $2) OR (sku = $2"},
		{"NUL in the table", Guard{Table: "inven\x00tory"}, db, 1, setQty, whereSKU},
		{"newline in the fence column", Guard{Table: "inventory", FenceColumn: "fen\nce"}, db, 1, setQty, whereSKU},
		{"table part past 63 bytes", Guard{Table: "shop." + strings.Repeat("t", 64)}, db, 1, setQty, whereSKU},
		{"where leaving a string open", inv, db, 1, setQty, "sku = '"},
		{"set escaping its parentheses", inv, db, 1, "qty = ($1)) + 0", whereSKU},
		{"fence 0", inv, db, 0, setQty, whereSKU},
		{"fence above bigint", inv, db, math.MaxInt64 + 1, setQty, whereSKU},
		{"unknown comparison", Guard{Table: "inventory", Compare: fence.Comparison(7)}, db, 1, setQty, whereSKU},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := tt.g.Update(t.Context(), tt.db, tt.stored, tt.set, tt.where, 1, "WH-01")
			assert.ErrorIs(t, err, fence.ErrInvalidArgument)
			assert.Zero(t, n)
		})
	}
}

func TestGuardMigration(t *testing.T) {
	t.Parallel()
	assert.Equal(t, `ALTER TABLE "inventory" ADD COLUMN IF NOT EXISTS "fence" bigint NOT NULL DEFAULT 0`,
		Guard{Table: "inventory"}.Migration())
	assert.Equal(t, `ALTER TABLE "shop"."Stock" ADD COLUMN IF NOT EXISTS "f""x" bigint NOT NULL DEFAULT 0`,
		Guard{Table: "shop.Stock", FenceColumn: `f"x`}.Migration())
}

func TestGuardContext(t *testing.T) {
	t.Parallel()
	pool := inventory(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := Guard{Table: "inventory"}.Update(ctx, pool, 1, setQty, whereSKU, 1, "WH-01")
	assert.True(t, errors.Is(err, context.Canceled), "%v", err)
}

// TestGuardClaim: a claim raises the row's fence before the new holder
// reads, so the stale holder's write that lands after it is refused although
// the new holder has not written yet. Not parallel: it counts fence.Rejected.
func TestGuardClaim(t *testing.T) {
	pool := inventory(t)
	ctx := t.Context()
	g := Guard{Table: "inventory"}

	n, err := g.Claim(ctx, pool, 42, "sku = $1", "WH-01")
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)
	qty, stored := row(t, pool, "WH-01")
	assert.Equal(t, 10, qty, "a claim changes nothing but the fence")
	assert.Equal(t, int64(42), stored)

	before := fence.Rejected()
	_, err = g.Update(ctx, pool, 41, setQty, whereSKU, 1, "WH-01")
	require.ErrorIs(t, err, fence.ErrFenceRejected, "the stale write after the claim")
	_, err = g.Claim(ctx, pool, 41, "sku = $1", "WH-01")
	require.ErrorIs(t, err, fence.ErrFenceRejected, "a stale claim")
	assert.Equal(t, before+2, fence.Rejected())

	_, err = g.Update(ctx, pool, 42, setQty, whereSKU, 9, "WH-01")
	require.NoError(t, err, "the claimant writes with its own fence")
	qty, _ = row(t, pool, "WH-01")
	assert.Equal(t, 9, qty)

	_, err = g.Claim(ctx, pool, 43, "sku = $1", "WH-99")
	assert.ErrorIs(t, err, ErrNoRow)
	_, err = Guard{Table: "inventory", Compare: fence.Newer}.Claim(ctx, pool, 50, "sku = $1", "WH-01")
	assert.ErrorIs(t, err, fence.ErrInvalidArgument)
	_, err = g.Claim(ctx, pool, 50, " ", "WH-01")
	assert.ErrorIs(t, err, fence.ErrInvalidArgument)
}

// waitForLockWaiter returns once a session of the test's database waits for
// a lock.
func waitForLockWaiter(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
		return err == nil && n > 0
	}, 10*time.Second, 5*time.Millisecond, "the guarded update never waited for the row")
}

// TestGuardConcurrentChange: a transaction changes the row while a guarded
// update waits for it. Only a newer fence stored by that transaction is a
// rejection; a row that no longer matches, or is gone, is a conflict to
// retry, not counted; a change that keeps the row matching and admits the
// fence lets the update through. Not parallel: it counts fence.Rejected.
func TestGuardConcurrentChange(t *testing.T) {
	const (
		take  = "qty = qty - $1"
		where = "sku = $2 AND qty >= $1"
	)
	g := Guard{Table: "inventory"}
	tests := []struct {
		name     string
		change   func(ctx context.Context, tx pgx.Tx) error
		want     error // nil: the update goes through
		retry    error // what the same update gives afterwards
		rejected uint64
		qty      int    // left in the row at the end; -1: no row
		msg      string // in the first error
	}{
		{"condition made false, same fence", func(ctx context.Context, tx pgx.Tx) error {
			_, err := g.Update(ctx, tx, 7, take, where, 10, "WH-01")
			return err
		}, ErrConflict, ErrNoRow, 0, 0, "retry"},
		{"row deleted", func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "DELETE FROM inventory WHERE sku = 'WH-01'")
			return err
		}, ErrConflict, ErrNoRow, 0, -1, "retry"},
		{"newer fence", func(ctx context.Context, tx pgx.Tx) error {
			_, err := g.Update(ctx, tx, 8, take, where, 1, "WH-01")
			return err
		}, fence.ErrFenceRejected, fence.ErrFenceRejected, 2, 9, "stores fence 8, written while this update waited"},
		{"still matches, same fence", func(ctx context.Context, tx pgx.Tx) error {
			_, err := g.Update(ctx, tx, 7, take, where, 1, "WH-01")
			return err
		}, nil, ErrNoRow, 0, 4, ""}, // 4 left: the retry's 5 do not match
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := inventory(t)
			ctx := t.Context()
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer tx.Rollback(context.Background())
			require.NoError(t, tt.change(ctx, tx))

			before := fence.Rejected()
			done := make(chan error, 1)
			go func() {
				_, err := g.Update(ctx, pool, 7, take, where, 5, "WH-01")
				done <- err
			}()
			waitForLockWaiter(t, pool)
			require.NoError(t, tx.Commit(ctx))
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the guarded update did not return after the commit")
			}
			if tt.want == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tt.want)
				assert.Contains(t, err.Error(), tt.msg)
			}
			if tt.want == ErrConflict {
				assert.NotErrorIs(t, err, fence.ErrFenceRejected)
			}
			_, err = g.Update(ctx, pool, 7, take, where, 5, "WH-01")
			require.ErrorIs(t, err, tt.retry, "the retry")
			assert.Equal(t, before+tt.rejected, fence.Rejected())
			var qty int
			err = pool.QueryRow(ctx, "SELECT qty FROM inventory WHERE sku = 'WH-01'").Scan(&qty)
			if tt.qty < 0 {
				assert.ErrorIs(t, err, pgx.ErrNoRows)
			} else {
				require.NoError(t, err)
				assert.Equal(t, tt.qty, qty)
			}
		})
	}
}

// TestGuardNeverLowersFence: the fragments run as SQL. One that would
// escape its parentheses, and the fence check with them, is refused before
// anything is sent (it used to run: a stale holder's write landed); the
// guard's own assignment, GREATEST(fence, $n), would still keep the stored
// fence from going down. A SET fragment cannot assign the fence column
// itself: PostgreSQL refuses two assignments.
func TestGuardNeverLowersFence(t *testing.T) {
	t.Parallel()
	pool := inventory(t)
	ctx := t.Context()
	g := Guard{Table: "inventory"}
	_, err := g.Update(ctx, pool, 42, setQty, whereSKU, 9, "WH-01")
	require.NoError(t, err)

	for _, escaping := range []string{"sku = $2) OR (false", "sku = $2) OR (sku = $2", "sku = $2)) OR ((true"} {
		n, err := g.Update(ctx, pool, 41, setQty, escaping, 8, "WH-01")
		require.ErrorIs(t, err, fence.ErrInvalidArgument, "a WHERE that escapes its parentheses ran: %s", escaping)
		assert.Zero(t, n)
	}
	qty, stored := row(t, pool, "WH-01")
	assert.Equal(t, 9, qty, "the stale write landed: the fragment escaped the check")
	assert.Equal(t, int64(42), stored, "the stored fence went down")
	_, err = g.Update(ctx, pool, 41, setQty, whereSKU, 7, "WH-01")
	require.ErrorIs(t, err, fence.ErrFenceRejected, "later stale writers stay refused")

	_, err = g.Update(ctx, pool, 43, "qty = $1, fence = 0", whereSKU, 6, "WH-01")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "multiple assignments")
	_, stored = row(t, pool, "WH-01")
	assert.Equal(t, int64(42), stored)
}
