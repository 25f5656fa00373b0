// Package sqlfence makes a table refuse writes from stale lock holders through database/sql,
// on MySQL and MariaDB, SQLite and PostgreSQL: [Guard] checks the writer's fence against the
// one stored in the row and writes in the same statement, on the caller's *sql.DB, *sql.Conn
// or *sql.Tx. It imports no driver: the program registers its own (github.com/go-sql-driver/mysql,
// modernc.org/sqlite, github.com/jackc/pgx/v5/stdlib). It mints no fences, and holds no
// connection or state of its own. docs/fencing.md shows, for each store, the migration and the
// statements the guard sends.
package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"

	"quorumlock.dev/fence"
	"quorumlock.dev/fence/internal/fragment"
	"quorumlock.dev/fence/internal/rejection"
	"quorumlock.dev/internal/names"
	"quorumlock.dev/internal/nilcheck"
)

var (
	// ErrNoRow reports a guarded update whose WHERE clause matched no row: nothing was
	// written, and no fence was involved. On MySQL and SQLite it also reports a row that a
	// concurrent transaction deleted, or changed so that it no longer matches, while the
	// update waited for it: read again before a retry.
	ErrNoRow = errors.New("fence: no row matches")
	// ErrConflict reports a guarded update that changed nothing because a concurrent
	// transaction changed the rows it matched, and stored no newer fence. Nothing was
	// written; read again and retry.
	ErrConflict = errors.New("fence: row changed concurrently; retry")
)

// DB is the part of a database/sql handle that [Guard] needs: *sql.DB, *sql.Conn and *sql.Tx
// satisfy it.
type DB interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

var (
	_ DB = (*sql.DB)(nil)
	_ DB = (*sql.Conn)(nil)
	_ DB = (*sql.Tx)(nil)
)

// Dialect is the SQL a [Guard] speaks. There is no default: the zero Dialect is refused.
type Dialect int

const (
	// PostgreSQL, through github.com/jackc/pgx/v5/stdlib: placeholders $1, $2...
	PostgreSQL Dialect = iota + 1
	// MySQL and MariaDB, through github.com/go-sql-driver/mysql: placeholders ?.
	MySQL
	// SQLite (modernc.org/sqlite, or another driver): placeholders ?.
	SQLite
)

// String returns the dialect's name.
func (d Dialect) String() string {
	switch d {
	case PostgreSQL:
		return "PostgreSQL"
	case MySQL:
		return "MySQL"
	case SQLite:
		return "SQLite"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// Guard makes a table refuse writes from stale lock holders. Each guarded row stores, in a
// 64-bit integer column, the fence of the last write that changed it; [Guard.Update] changes a
// row only if the writer's fence passes the comparison with the stored one, in the same
// statement, so the check holds however late the write arrives. Rows written without the guard
// bypass it.
//
// The zero value of FenceColumn and Compare is usable; Dialect and Table must be set. A Guard
// holds no state and is safe for concurrent use.
type Guard struct {
	// Dialect is the database's: PostgreSQL, MySQL (MariaDB too) or SQLite.
	Dialect Dialect
	// Table is the guarded table, "table" or "schema.table". Each part is made of ASCII
	// letters, digits and _, not starting with a digit: a name that needs quoting is refused,
	// since the dialects quote and fold case differently. The guard quotes each part, so a
	// reserved word is fine, and PostgreSQL keeps its case.
	Table string
	// FenceColumn is the column that stores the fence, "fence" if empty; named as Table is.
	FenceColumn string
	// Compare says which fences are admitted against the stored one: fence.AtLeast (the
	// default, stored <= fence) or fence.Newer (stored < fence).
	Compare fence.Comparison
	// OnReject, when not nil, is called once for each write the guard refuses, before Update
	// or Claim returns; it must be safe for concurrent use.
	OnReject func()
}

// Migration returns the statement that adds the fence column to the guarded table:
//
//	PostgreSQL: ALTER TABLE "t" ADD COLUMN IF NOT EXISTS "fence" bigint NOT NULL DEFAULT 0
//	MySQL:      ALTER TABLE `t` ADD COLUMN `fence` BIGINT NOT NULL DEFAULT 0
//	SQLite:     ALTER TABLE "t" ADD COLUMN "fence" INTEGER NOT NULL DEFAULT 0
//
// MySQL and SQLite have no IF NOT EXISTS here: run it once. Existing rows get 0, which every
// fence passes. A guard with a bad dialect or name gives [fence.ErrInvalidArgument].
func (g Guard) Migration() (string, error) {
	if err := g.check(); err != nil {
		return "", err
	}
	switch g.Dialect {
	case PostgreSQL:
		return "ALTER TABLE " + g.table() + " ADD COLUMN IF NOT EXISTS " + g.column() + " bigint NOT NULL DEFAULT 0", nil
	case MySQL:
		return "ALTER TABLE " + g.table() + " ADD COLUMN " + g.column() + " BIGINT NOT NULL DEFAULT 0", nil
	default:
		return "ALTER TABLE " + g.table() + " ADD COLUMN " + g.column() + " INTEGER NOT NULL DEFAULT 0", nil
	}
}

// Update runs, with token for the guard's placeholders (MySQL shown; docs/fencing.md has
// each dialect's statements),
//
//	UPDATE `t` SET <set>, `fence` = GREATEST(`fence`, ?) WHERE (<where>) AND `fence` <= ?
//
// (< for fence.Newer), and returns the rows written, at least 1; otherwise the error says why:
// [fence.ErrFenceRejected] (counted in [fence.Rejected], told to OnReject), [ErrNoRow] or
// [ErrConflict]. Values go in args: for MySQL and SQLite through ?, the SET's first; for
// PostgreSQL through $1..$n. A fragment that could take the statement apart, or other bad
// input, is [fence.ErrInvalidArgument], and nothing is sent.
func (g Guard) Update(ctx context.Context, db DB, token uint64, set, where string, args ...any) (int64, error) {
	if strings.TrimSpace(set) == "" {
		return 0, fmt.Errorf("%w: empty SET clause", fence.ErrInvalidArgument)
	}
	return g.update(ctx, db, token, set, where, args)
}

// Claim raises the fence stored in the rows that match where to token, if token is not older,
// and changes nothing else: the statement, check and errors of [Guard.Update] with an empty
// SET. A holder claims the rows it will decide on before it reads them, so that an older
// holder's write that lands later is refused (docs/fencing.md, "Claim first"). Claim needs
// the fence.AtLeast comparison, since the holder's own writes that follow carry the same
// fence: with fence.Newer it returns [fence.ErrInvalidArgument].
func (g Guard) Claim(ctx context.Context, db DB, token uint64, where string, args ...any) (int64, error) {
	if g.Compare != fence.AtLeast {
		return 0, fmt.Errorf("%w: Claim needs the AtLeast comparison", fence.ErrInvalidArgument)
	}
	return g.update(ctx, db, token, "", where, args)
}

func (g Guard) update(ctx context.Context, db DB, token uint64, set, where string, args []any) (int64, error) {
	if err := g.check(); err != nil {
		return 0, err
	}
	syntax := g.syntax()
	switch {
	case nilcheck.Is(db):
		return 0, fmt.Errorf("%w: nil database", fence.ErrInvalidArgument)
	case strings.TrimSpace(where) == "":
		return 0, fmt.Errorf("%w: empty WHERE clause", fence.ErrInvalidArgument)
	case token == 0 || token > math.MaxInt64:
		return 0, fmt.Errorf("%w: fence %d is not in 1..%d", fence.ErrInvalidArgument, token, int64(math.MaxInt64))
	}
	whereParams, err := fragment.Check(where, syntax)
	if err != nil {
		return 0, fmt.Errorf("%w: WHERE fragment %s %v: it could escape the fence check", fence.ErrInvalidArgument, names.Quote(where), err)
	}
	setParams, err := fragment.Check(set, syntax)
	if err != nil {
		return 0, fmt.Errorf("%w: SET fragment %s %v", fence.ErrInvalidArgument, names.Quote(set), err)
	}
	if g.Dialect != PostgreSQL && setParams+whereParams != len(args) {
		return 0, fmt.Errorf("%w: the fragments hold %d ? placeholders for %d values", fence.ErrInvalidArgument, setParams+whereParams, len(args))
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if g.Dialect == PostgreSQL {
		return g.updatePostgres(ctx, db, token, set, where, args)
	}
	return g.updateQuestion(ctx, db, token, set, where, args[:setParams:setParams], args[setParams:])
}

// check reports a guard that no statement can be built for, as fence.ErrInvalidArgument.
func (g Guard) check() error {
	switch {
	case g.Dialect != PostgreSQL && g.Dialect != MySQL && g.Dialect != SQLite:
		return fmt.Errorf("%w: unknown dialect %v", fence.ErrInvalidArgument, g.Dialect)
	case g.Compare != fence.AtLeast && g.Compare != fence.Newer:
		return fmt.Errorf("%w: unknown comparison %d", fence.ErrInvalidArgument, g.Compare)
	}
	parts := strings.Split(g.Table, ".")
	if len(parts) > 2 {
		return fmt.Errorf("%w: table %s has more than two parts", fence.ErrInvalidArgument, names.Quote(g.Table))
	}
	for _, part := range parts {
		if err := checkName("table", part); err != nil {
			return err
		}
	}
	if g.FenceColumn != "" {
		return checkName("fence column", g.FenceColumn)
	}
	return nil
}

// checkName reports a name that is no identifier, or one that needs quoting.
func checkName(what, name string) error {
	if err := names.Identifier(what, name); err != nil {
		return fmt.Errorf("%w: %w", fence.ErrInvalidArgument, err)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c != '_' && !(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z') && !(i > 0 && c >= '0' && c <= '9') {
			return fmt.Errorf("%w: %s %s needs quoting: use ASCII letters, digits and _, not starting with a digit", fence.ErrInvalidArgument, what, names.Quote(name))
		}
	}
	return nil
}

// quote quotes a name that check accepted, which holds no quote character.
func (g Guard) quote(name string) string {
	if g.Dialect == MySQL {
		return "`" + name + "`"
	}
	return `"` + name + `"`
}

func (g Guard) table() string {
	parts := strings.Split(g.Table, ".")
	for i, p := range parts {
		parts[i] = g.quote(p)
	}
	return strings.Join(parts, ".")
}

func (g Guard) column() string {
	if g.FenceColumn == "" {
		return g.quote("fence")
	}
	return g.quote(g.FenceColumn)
}

func (g Guard) syntax() fragment.Syntax {
	switch g.Dialect {
	case PostgreSQL:
		return fragment.PostgreSQL
	case MySQL:
		return fragment.MySQL
	default:
		return fragment.SQLite
	}
}

func (g Guard) op() string {
	if g.Compare == fence.Newer {
		return "<"
	}
	return "<="
}

// admits reports whether the guard admits token against stored, a fence of 0 or more.
func (g Guard) admits(stored int64, token uint64) bool {
	return uint64(stored) < token || (g.Compare == fence.AtLeast && uint64(stored) == token)
}

// reject counts one refused write and returns its error.
func (g Guard) reject(stored int64, token uint64, how string) error {
	return fmt.Errorf("%w: %s stores fence %d%s, offered %d", rejection.Reject(g.OnReject), g.Table, stored, how, token)
}

// nullFence is the error of a matching row whose fence is NULL: a misconfigured column, not a
// stale writer, so not counted as a rejection.
func (g Guard) nullFence() error {
	return fmt.Errorf("fence: update %s: a matching row has a NULL fence, which no fence passes; make the column NOT NULL (see Migration)", g.Table)
}

// assign is the guard's assignment of the fence, after set when there is one. A newline ends
// each fragment, so that a trailing line comment in one cannot hide the guard's text.
func (g Guard) assign(set, param string) string {
	greatest := "GREATEST"
	if g.Dialect == SQLite {
		greatest = "max" // SQLite's two-argument max is scalar; it has no GREATEST
	}
	a := fmt.Sprintf("%[1]s = %[2]s(%[1]s, %[3]s)", g.column(), greatest, param)
	if set != "" {
		a = set + "\n, " + a
	}
	return a
}

// updateQuestion is the update of MySQL and SQLite: the UPDATE, and when it changed no row, a
// second statement that reads the matching rows to tell why. On MySQL the read locks them
// (LOCK IN SHARE MODE), so that in a REPEATABLE READ transaction it sees what the UPDATE saw,
// the newest versions, rather than the transaction's snapshot; the locks last until the
// transaction ends.
func (g Guard) updateQuestion(ctx context.Context, db DB, token uint64, set, where string, setArgs, whereArgs []any) (int64, error) {
	update := fmt.Sprintf("UPDATE %s SET %s\nWHERE (%s\n) AND %s %s ?", g.table(), g.assign(set, "?"), where, g.column(), g.op())
	args := make([]any, 0, len(setArgs)+len(whereArgs)+2)
	args = append(append(append(append(args, setArgs...), int64(token)), whereArgs...), int64(token))
	res, err := db.ExecContext(ctx, update, args...)
	if err != nil {
		return 0, fmt.Errorf("fence: update %s: %w", g.Table, err)
	}
	changed, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("fence: update %s: %w", g.Table, err)
	}
	if changed > 0 {
		return changed, nil
	}

	// holding counts the rows that already store token: MySQL does not count a row that the
	// update matched but left as it was.
	read := fmt.Sprintf("SELECT COUNT(*), MIN(COALESCE(%[1]s, -1)), MAX(COALESCE(%[1]s, -1)), SUM(CASE WHEN %[1]s = ? THEN 1 ELSE 0 END)\nFROM %[2]s WHERE (%[3]s\n)",
		g.column(), g.table(), where)
	if g.Dialect == MySQL {
		read += " LOCK IN SHARE MODE"
	}
	var (
		matched              int64
		least, most, holding sql.NullInt64 // NULL when nothing matched
	)
	if err := db.QueryRowContext(ctx, read, append([]any{int64(token)}, whereArgs...)...).Scan(&matched, &least, &most, &holding); err != nil {
		return 0, fmt.Errorf("fence: update %s: nothing changed, and reading why failed: %w", g.Table, err)
	}
	switch {
	case matched == 0:
		return 0, fmt.Errorf("%w in %s", ErrNoRow, g.Table)
	case least.Int64 < 0:
		return 0, g.nullFence()
	case g.Dialect == MySQL && g.Compare == fence.AtLeast && holding.Int64 > 0:
		return holding.Int64, nil
	case !g.admits(most.Int64, token):
		return 0, g.reject(most.Int64, token, "")
	default:
		// The rows match and admit token now, but did not when the update ran.
		return 0, fmt.Errorf("%w: %s, offered fence %d", ErrConflict, g.Table, token)
	}
}

// updatePostgres is pgfence.Guard's update, through database/sql.
func (g Guard) updatePostgres(ctx context.Context, db DB, token uint64, set, where string, args []any) (int64, error) {
	n := len(args) + 1
	query := fmt.Sprintf(fragment.PostgresUpdate, g.table(), g.column(), g.assign(set, fmt.Sprintf("$%d", n)), where, n, g.op())
	var (
		changed      int64
		seen, latest sql.NullInt64
	)
	args = append(args[:len(args):len(args)], int64(token))
	if err := db.QueryRowContext(ctx, query, args...).Scan(&changed, &seen, &latest); err != nil {
		return 0, fmt.Errorf("fence: update %s: %w", g.Table, err)
	}
	switch {
	case changed > 0:
		return changed, nil
	case !seen.Valid:
		return 0, fmt.Errorf("%w in %s", ErrNoRow, g.Table)
	case seen.Int64 < 0:
		return 0, g.nullFence()
	case !g.admits(seen.Int64, token):
		return 0, g.reject(seen.Int64, token, "")
	case latest.Valid && latest.Int64 >= 0 && !g.admits(latest.Int64, token):
		return 0, g.reject(latest.Int64, token, ", written while this update waited")
	default:
		return 0, fmt.Errorf("%w: %s, offered fence %d", ErrConflict, g.Table, token)
	}
}
