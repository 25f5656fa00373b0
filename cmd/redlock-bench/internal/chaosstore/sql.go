package chaosstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	_ "github.com/go-sql-driver/mysql" // "mysql" of database/sql
	_ "modernc.org/sqlite"             // "sqlite" of database/sql

	"quorumlock.dev/cmd/redlock-bench/internal/chaoscheck"
	"quorumlock.dev/fence"
	"quorumlock.dev/fence/sqlfence"
)

// sqlTables are the tables of the MySQL and SQLite stores, as pgTables are PostgreSQL's: rows
// (a resource's fence and next job, guarded by sqlfence.Guard), jobs and shadow.
type sqlTables struct {
	kind               string
	rows, jobs, shadow string // quoted
	guard              sqlfence.Guard
}

func tablesForSQL(kind, prefix string) sqlTables {
	t := sqlTables{kind: kind, guard: sqlfence.Guard{Dialect: sqlfence.SQLite, Table: prefix + "_rows"}}
	q := func(name string) string { return `"` + prefix + "_" + name + `"` }
	if kind == MySQL {
		t.guard.Dialect = sqlfence.MySQL
		q = func(name string) string { return "`" + prefix + "_" + name + "`" }
	}
	t.rows, t.jobs, t.shadow = q("rows"), q("jobs"), q("shadow")
	return t
}

// openSQL opens a MySQL DSN, or an SQLite file in WAL mode with a busy timeout, so that the
// workers' processes can share it, and transactions that take the write lock as they begin.
func openSQL(kind, dsn string) (*sql.DB, error) {
	driver := "mysql"
	if kind == SQLite {
		driver = "sqlite"
		dsn = "file:" + dsn + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate"
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, fmt.Errorf("chaos: %s: %w", kind, err)
	}
	return db, nil
}

// setupSQL creates the tables and a row for each resource.
func setupSQL(ctx context.Context, db *sql.DB, t sqlTables, resources []string) error {
	migration, err := t.guard.Migration()
	if err != nil {
		return fmt.Errorf("chaos: %s setup: %w", t.kind, err)
	}
	stmts := []string{
		"CREATE TABLE " + t.rows + " (resource VARCHAR(191) PRIMARY KEY, next_job BIGINT NOT NULL DEFAULT 0)",
		migration,
		"CREATE TABLE " + t.jobs + " (seq BIGINT AUTO_INCREMENT PRIMARY KEY, resource VARCHAR(191) NOT NULL, job BIGINT NOT NULL, fence BIGINT NOT NULL, worker INT NOT NULL)",
		"CREATE TABLE " + t.shadow + " (seq BIGINT AUTO_INCREMENT PRIMARY KEY, resource VARCHAR(191) NOT NULL, job BIGINT NOT NULL, worker INT NOT NULL)",
	}
	if t.kind == SQLite {
		// INTEGER PRIMARY KEY is SQLite's rowid: it numbers rows in insertion order.
		stmts = []string{
			"CREATE TABLE " + t.rows + " (resource TEXT PRIMARY KEY, next_job INTEGER NOT NULL DEFAULT 0)",
			migration,
			"CREATE TABLE " + t.jobs + " (seq INTEGER PRIMARY KEY, resource TEXT NOT NULL, job INTEGER NOT NULL, fence INTEGER NOT NULL, worker INTEGER NOT NULL)",
			"CREATE TABLE " + t.shadow + " (seq INTEGER PRIMARY KEY, resource TEXT NOT NULL, job INTEGER NOT NULL, worker INTEGER NOT NULL)",
		}
	}
	for _, q := range stmts {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("chaos: %s setup: %w", t.kind, err)
		}
	}
	for _, res := range resources {
		if _, err := db.ExecContext(ctx, "INSERT INTO "+t.rows+" (resource) VALUES (?)", res); err != nil {
			return fmt.Errorf("chaos: %s setup: %w", t.kind, err)
		}
	}
	return nil
}

// dropSQL removes the tables.
func dropSQL(ctx context.Context, db *sql.DB, t sqlTables) error {
	var errs []error
	for _, name := range []string{t.rows, t.jobs, t.shadow} {
		if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// finalSQL reads what the tables hold.
func finalSQL(ctx context.Context, db *sql.DB, t sqlTables) (chaoscheck.Final, error) {
	f := chaoscheck.Final{Fenced: map[string][]chaoscheck.Entry{}, Shadow: map[string][]chaoscheck.Entry{}}
	for _, q := range []struct {
		sql  string
		into map[string][]chaoscheck.Entry
	}{
		{"SELECT resource, job, fence, worker FROM " + t.jobs + " ORDER BY seq", f.Fenced},
		{"SELECT resource, job, 0, worker FROM " + t.shadow + " ORDER BY seq", f.Shadow},
	} {
		if err := readEntries(ctx, db, q.sql, q.into); err != nil {
			return f, fmt.Errorf("chaos: %s final: %w", t.kind, err)
		}
	}
	return f, nil
}

func readEntries(ctx context.Context, db *sql.DB, query string, into map[string][]chaoscheck.Entry) error {
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var res string
		var e chaoscheck.Entry
		var fv int64
		if err := rows.Scan(&res, &e.Job, &fv, &e.Worker); err != nil {
			return err
		}
		e.Fence = uint64(fv)
		into[res] = append(into[res], e)
	}
	return rows.Err()
}

// sqlBackend is a worker's MySQL or SQLite store: the fenced calls go through sqlfence.Guard,
// each in one transaction with what it reads or records, as pgBackend's do.
type sqlBackend struct {
	db *sql.DB
	t  sqlTables
}

func dialSQL(a Addr) (*sqlBackend, error) {
	db, err := openSQL(a.Kind, a.DSN)
	if err != nil {
		return nil, err
	}
	return &sqlBackend{db: db, t: tablesForSQL(a.Kind, a.Prefix)}, nil
}

func (b *sqlBackend) Call(ctx context.Context, kind string, res string, f uint64, job int64, worker int) (Answer, error) {
	switch kind {
	case "shadow-read":
		var n int64
		err := b.db.QueryRowContext(ctx, "SELECT count(*) FROM "+b.t.shadow+" WHERE resource = ?", res).Scan(&n)
		return Answer{Outcome: chaoscheck.OK, Job: n}, err
	case "shadow-write":
		_, err := b.db.ExecContext(ctx, "INSERT INTO "+b.t.shadow+" (resource, job, worker) VALUES (?, ?, ?)", res, job, worker)
		return Answer{Outcome: chaoscheck.OK}, err
	}
	var a Answer
	err := b.inTx(ctx, func(tx *sql.Tx) error {
		if kind == string(chaoscheck.Claim) {
			if _, err := b.t.guard.Claim(ctx, tx, f, "resource = ?", res); err != nil {
				return err
			}
			return tx.QueryRowContext(ctx, "SELECT next_job FROM "+b.t.rows+" WHERE resource = ?", res).Scan(&a.Job)
		}
		if _, err := b.t.guard.Update(ctx, tx, f, "next_job = next_job + 1", "resource = ?", res); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO "+b.t.jobs+" (resource, job, fence, worker) VALUES (?, ?, ?, ?)", res, job, int64(f), worker)
		return err
	})
	return guarded(a, err)
}

// inTx runs do in a transaction, committed if do returns nil and rolled back otherwise.
func (b *sqlBackend) inTx(ctx context.Context, do func(*sql.Tx) error) error {
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := do(tx); err != nil {
		if rerr := tx.Rollback(); rerr != nil && !errors.Is(rerr, sql.ErrTxDone) {
			return errors.Join(err, rerr)
		}
		return err
	}
	return tx.Commit()
}

// guarded is the answer to a guarded call (pg.go's and this file's) that
// read a and ended with err: a write the guard refused is an answer, not
// an error.
func guarded(a Answer, err error) (Answer, error) {
	switch {
	case errors.Is(err, fence.ErrFenceRejected):
		return Answer{Outcome: chaoscheck.Rejected}, nil
	case err != nil:
		return Answer{}, err
	}
	a.Outcome = chaoscheck.OK
	return a, nil
}
