// Package pgfence keeps fences in PostgreSQL: [Counter] mints them in a
// table, one row per resource, and [Guard] makes a table refuse writes from
// stale lock holders, checking the fence in the same statement as the write.
// It is apart from package fence so that only programs that use PostgreSQL
// link pgx. docs/fencing.md explains the claim-then-write pattern.
package pgfence

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"quorumlock.dev/fence"
	"quorumlock.dev/fence/internal/fragment"
	"quorumlock.dev/fence/internal/rejection"
	"quorumlock.dev/internal/names"
	"quorumlock.dev/internal/nilcheck"
)

var (
	// ErrNoRow reports a guarded update whose WHERE clause matches no row: nothing was
	// written, and no fence was involved.
	ErrNoRow = errors.New("fence: no row matches")
	// ErrConflict reports a guarded update that changed nothing because a concurrent
	// transaction changed the rows it matched while it waited for them, and stored no newer
	// fence: they no longer match, or are gone. Nothing was written; retry the statement.
	ErrConflict = errors.New("fence: row changed concurrently; retry")
)

// DB is the part of a pgx connection or pool that [Counter] and [Guard] need.
// *pgxpool.Pool, *pgx.Conn and pgx.Tx satisfy it; [NewCounter] refuses a pgx.Tx.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

var (
	_ DB = (*pgxpool.Pool)(nil)
	_ DB = (*pgx.Conn)(nil)
	_ DB = pgx.Tx(nil)
)

// Schema creates the table of [Counter], if it does not exist: one row per resource
// holding the last fence minted. Run it once, with db.Exec, or apply schema.sql, which holds
// the same statement.
const Schema = `CREATE TABLE IF NOT EXISTS quorumlock_fence (
	resource text PRIMARY KEY,
	value    bigint NOT NULL CHECK (value > 0)
)`

const (
	// mintSQL creates the row at 1 or increments it, and returns the new value, in one
	// statement: the row lock orders concurrent mints, so each gets its own value.
	mintSQL = `INSERT INTO quorumlock_fence (resource, value) VALUES ($1, 1)
ON CONFLICT (resource) DO UPDATE SET value = quorumlock_fence.value + 1
RETURNING value`
	seedSQL = `INSERT INTO quorumlock_fence (resource, value) VALUES ($1, $2)
ON CONFLICT (resource) DO UPDATE SET value = GREATEST(quorumlock_fence.value, EXCLUDED.value)`
)

// Counter mints fencing tokens in a PostgreSQL table, quorumlock_fence (see
// [Schema]), one row per resource. It is an alternative to [fence.RedisCounter] for a lock
// whose protected data already lives in PostgreSQL: the counter is then as durable as that
// data, and needs no Redis node of its own. It is safe for concurrent use.
type Counter struct {
	db DB
}

var _ fence.Minter = (*Counter)(nil)

// NewCounter returns a counter that runs its statements on db, each committed on its own.
// A pgx.Tx gives [fence.ErrInvalidArgument]: a mint in a transaction that rolls back is handed out
// again. A *pgx.Conn inside a transaction block (after BEGIN) has the same flaw and cannot be
// detected: do not pass one. The table must exist (see [Schema]).
func NewCounter(db DB) (*Counter, error) {
	if nilcheck.Is(db) {
		return nil, fmt.Errorf("%w: nil database", fence.ErrInvalidArgument)
	}
	if _, ok := db.(pgx.Tx); ok {
		return nil, fmt.Errorf("%w: a pgx.Tx: a mint that rolls back would be handed out again; pass the pool", fence.ErrInvalidArgument)
	}
	return &Counter{db: db}, nil
}

// Mint increments the counter of resource, creating it at 1, and returns its new value, in
// one statement. It returns when ctx ends, as pgx does; a statement that the server received
// may still commit after that, which leaves a gap in the sequence but never a repeat.
func (c *Counter) Mint(ctx context.Context, resource string) (uint64, error) {
	if err := names.Resource(resource); err != nil {
		return 0, fmt.Errorf("%w: %w", fence.ErrInvalidArgument, err)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var v int64
	if err := c.db.QueryRow(ctx, mintSQL, resource).Scan(&v); err != nil {
		return 0, fmt.Errorf("fence: mint %s: %w", resource, err)
	}
	if v <= 0 {
		return 0, fmt.Errorf("%w: %s is %d", fence.ErrCounter, resource, v)
	}
	return uint64(v), nil
}

// Seed raises the counter of resource to at least atLeast, and never lowers it, in one
// statement; the next Mint then returns more than atLeast. It is how a counter continues
// from another one (the Redis counter it replaces). As a repair after a loss, atLeast must
// exceed every fence that may have been handed out, with a margin: storage's largest fence
// misses those minted but never written (docs/fencing.md). A seed of 0 changes nothing.
func (c *Counter) Seed(ctx context.Context, resource string, atLeast uint64) error {
	if err := names.Resource(resource); err != nil {
		return fmt.Errorf("%w: %w", fence.ErrInvalidArgument, err)
	}
	if atLeast > math.MaxInt64 {
		return fmt.Errorf("%w: seed %d is above what a bigint holds", fence.ErrInvalidArgument, atLeast)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if atLeast == 0 {
		return nil
	}
	if _, err := c.db.Exec(ctx, seedSQL, resource, int64(atLeast)); err != nil {
		return fmt.Errorf("fence: seed %s to %d: %w", resource, atLeast, err)
	}
	return nil
}

// Guard makes a PostgreSQL table reject writes from stale lock holders. Each guarded row
// stores, in a bigint column, the fence of the last write that changed it; [Guard.Update]
// changes a row only if the writer's fence passes the comparison with the stored one, in the
// same statement, so the check holds however late the write arrives. Rows written without
// the guard bypass it.
//
// The zero value of FenceColumn and Compare is usable. A Guard holds no state and is safe
// for concurrent use.
type Guard struct {
	// Table is the guarded table, "table" or "schema.table". Each part is quoted, so it is
	// taken literally: "Inventory" is not "inventory", and a name cannot hold a dot.
	Table string
	// FenceColumn is the column that stores the fence, "fence" if empty. It is quoted as
	// Table is.
	FenceColumn string
	// Compare says which fences are admitted against the stored one: AtLeast (the default,
	// stored <= fence) or Newer (stored < fence).
	Compare fence.Comparison
	// OnReject, when not nil, is called once for each write the guard refuses, before Update
	// or Claim returns; it must be safe for concurrent use. A metrics adapter counts
	// rejections with it.
	OnReject func()
}

func (g Guard) table() string {
	return pgx.Identifier(strings.Split(g.Table, ".")).Sanitize()
}

// checkNames reports why the table (each part of a dotted name) or the
// fence column cannot be an identifier: pgx would drop a NUL in silence,
// and PostgreSQL cut a name past 63 bytes.
func (g Guard) checkNames() error {
	for _, part := range strings.Split(g.Table, ".") {
		if err := names.Identifier("table", part); err != nil {
			return err
		}
	}
	if g.FenceColumn != "" {
		return names.Identifier("fence column", g.FenceColumn)
	}
	return nil
}

func (g Guard) column() string {
	if g.FenceColumn == "" {
		return pgx.Identifier{"fence"}.Sanitize()
	}
	return pgx.Identifier{g.FenceColumn}.Sanitize()
}

// Migration returns the statement that adds the fence column to the guarded table, if it is
// missing: ALTER TABLE <table> ADD COLUMN IF NOT EXISTS <fence> bigint NOT NULL DEFAULT 0.
// Existing rows get 0, which every fence passes.
func (g Guard) Migration() string {
	return "ALTER TABLE " + g.table() + " ADD COLUMN IF NOT EXISTS " + g.column() + " bigint NOT NULL DEFAULT 0"
}

// Update runs, in one statement,
//
//	UPDATE <table> SET <set>, <fence> = GREATEST(<fence>, $N) WHERE (<where>) AND <fence> <= $N
//
// (< for Newer), with token as $N (N = len(args)+1) and args as $1..; it
// returns the rows changed, at least 1. Otherwise the error says why:
// [fence.ErrFenceRejected] (counted in [fence.Rejected], told to OnReject), [ErrNoRow] or
// [ErrConflict] (retry). The fragments run as SQL: pass values in args. A
// fragment that closes a parenthesis it did not open, or leaves one, a
// string, a quoted name or a comment open, is [fence.ErrInvalidArgument]:
// "sku = $2) OR (sku = $2" would take the WHERE out of the fence check.
// Edge cases (several rows, NULL fences, transactions): docs/fencing.md.
func (g Guard) Update(ctx context.Context, db DB, token uint64, set, where string, args ...any) (int64, error) {
	if strings.TrimSpace(set) == "" {
		return 0, fmt.Errorf("%w: empty SET clause", fence.ErrInvalidArgument)
	}
	return g.update(ctx, db, token, set, where, args)
}

// Claim raises the fence stored in the rows that match where to fence, if
// fence is not older, and changes nothing else: the same statement, check
// and errors as [Guard.Update] with an empty SET. A holder claims the rows
// it will decide on before it reads them; an older holder's write that
// arrives later is then refused, even if the new holder has not written yet.
// Without the claim, a stale write that lands between the new holder's read
// and its write is accepted, and the new holder acts on what it read.
// Claim needs the AtLeast comparison, since the holder's own writes that
// follow carry the same fence: with Newer it returns [fence.ErrInvalidArgument].
func (g Guard) Claim(ctx context.Context, db DB, token uint64, where string, args ...any) (int64, error) {
	if g.Compare != fence.AtLeast {
		return 0, fmt.Errorf("%w: Claim needs the AtLeast comparison", fence.ErrInvalidArgument)
	}
	return g.update(ctx, db, token, "", where, args)
}

func (g Guard) update(ctx context.Context, db DB, token uint64, set, where string, args []any) (int64, error) {
	var op string
	switch g.Compare {
	case fence.AtLeast:
		op = "<="
	case fence.Newer:
		op = "<"
	default:
		return 0, fmt.Errorf("%w: unknown comparison %d", fence.ErrInvalidArgument, g.Compare)
	}
	switch {
	case nilcheck.Is(db):
		return 0, fmt.Errorf("%w: nil database", fence.ErrInvalidArgument)
	case g.checkNames() != nil:
		return 0, fmt.Errorf("%w: %w", fence.ErrInvalidArgument, g.checkNames())
	case strings.TrimSpace(where) == "":
		return 0, fmt.Errorf("%w: empty WHERE clause", fence.ErrInvalidArgument)
	case checkFragment(where) != nil:
		return 0, fmt.Errorf("%w: WHERE fragment %q %v: it could escape the fence check", fence.ErrInvalidArgument, where, checkFragment(where))
	case checkFragment(set) != nil:
		return 0, fmt.Errorf("%w: SET fragment %q %v", fence.ErrInvalidArgument, set, checkFragment(set))
	case token == 0 || token > math.MaxInt64:
		return 0, fmt.Errorf("%w: fence %d is not in 1..%d", fence.ErrInvalidArgument, token, int64(math.MaxInt64))
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}

	// GREATEST: even a fragment that escapes its parentheses, and with them the fence
	// check, cannot lower the stored fence.
	assign := fmt.Sprintf("%[1]s = GREATEST(%[1]s, $%[2]d)", g.column(), len(args)+1)
	if set != "" {
		assign = set + "\n, " + assign // a line of its own: a trailing -- comment in set cannot hide it
	}
	sql := fmt.Sprintf(fragment.PostgresUpdate, g.table(), g.column(), assign, where, len(args)+1, op)
	var (
		changed int64
		seen    *int64 // nil: no row matches where, or rows were changed
		latest  *int64 // nil unless seen admits fence
	)
	args = append(args[:len(args):len(args)], int64(token))
	if err := db.QueryRow(ctx, sql, args...).Scan(&changed, &seen, &latest); err != nil {
		return 0, fmt.Errorf("fence: update %s: %w", g.Table, err)
	}
	switch {
	case changed > 0:
		return changed, nil
	case seen == nil:
		return 0, fmt.Errorf("%w in %s", ErrNoRow, g.Table)
	case *seen < 0:
		// A misconfigured column, not a stale writer: not counted as a rejection.
		return 0, fmt.Errorf("fence: update %s: a matching row has a NULL fence, which no fence passes; make the column NOT NULL (see Migration)", g.Table)
	case !g.admits(*seen, token):
		return 0, fmt.Errorf("%w: %s stores fence %d, offered %d", rejection.Reject(g.OnReject), g.Table, *seen, token)
	case latest != nil && *latest >= 0 && !g.admits(*latest, token):
		return 0, fmt.Errorf("%w: %s stores fence %d, written while this update waited, offered %d", rejection.Reject(g.OnReject), g.Table, *latest, token)
	default:
		return 0, fmt.Errorf("%w: %s, offered fence %d", ErrConflict, g.Table, token)
	}
}

// admits reports whether the guard admits fence against stored, a fence of 0 or more.
func (g Guard) admits(stored int64, token uint64) bool {
	return uint64(stored) < token || (g.Compare == fence.AtLeast && uint64(stored) == token)
}

// Last reads the counter of resource without changing it: the last fence
// minted for it (or the value a Seed raised it to), and false when the table
// has no row for it. For an operator's inspection (redlock's
// Client.Inspect).
func (c *Counter) Last(ctx context.Context, resource string) (uint64, bool, error) {
	if err := names.Resource(resource); err != nil {
		return 0, false, fmt.Errorf("%w: %w", fence.ErrInvalidArgument, err)
	}
	var v int64
	err := c.db.QueryRow(ctx, `SELECT value FROM quorumlock_fence WHERE resource = $1`, resource).Scan(&v)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("fence: read %s: %w", resource, err)
	case v <= 0:
		return 0, false, fmt.Errorf("%w: %s is %d", fence.ErrCounter, resource, v)
	}
	return uint64(v), true, nil
}
