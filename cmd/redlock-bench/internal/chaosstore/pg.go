package chaosstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"quorumlock.dev/cmd/redlock-bench/internal/chaoscheck"
	"quorumlock.dev/fence/pgfence"
)

// pgTables are the PostgreSQL store's tables, named with a run's prefix: rows (a resource's
// fence and next job, guarded by pgfence.Guard), jobs (what the fenced rows recorded) and
// shadow (the same jobs without a fence).
type pgTables struct {
	rows, jobs, shadow string // quoted
	guard              pgfence.Guard
}

func tablesFor(prefix string) pgTables {
	return pgTables{
		rows:   pgx.Identifier{prefix + "_rows"}.Sanitize(),
		jobs:   pgx.Identifier{prefix + "_jobs"}.Sanitize(),
		shadow: pgx.Identifier{prefix + "_shadow"}.Sanitize(),
		guard:  pgfence.Guard{Table: prefix + "_rows"},
	}
}

// setupPG creates the tables and a row for each resource.
func setupPG(ctx context.Context, pool *pgxpool.Pool, prefix string, resources []string) error {
	t := tablesFor(prefix)
	stmts := []string{
		"CREATE TABLE " + t.rows + " (resource text PRIMARY KEY, next bigint NOT NULL DEFAULT 0)",
		t.guard.Migration(),
		"CREATE TABLE " + t.jobs + " (seq bigserial PRIMARY KEY, resource text NOT NULL, job bigint NOT NULL, fence bigint NOT NULL, worker int NOT NULL)",
		"CREATE TABLE " + t.shadow + " (seq bigserial PRIMARY KEY, resource text NOT NULL, job bigint NOT NULL, worker int NOT NULL)",
	}
	for _, q := range stmts {
		if _, err := pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("chaos: postgres setup: %w", err)
		}
	}
	for _, res := range resources {
		if _, err := pool.Exec(ctx, "INSERT INTO "+t.rows+" (resource) VALUES ($1)", res); err != nil {
			return fmt.Errorf("chaos: postgres setup: %w", err)
		}
	}
	return nil
}

// dropPG removes the tables.
func dropPG(ctx context.Context, pool *pgxpool.Pool, prefix string) error {
	t := tablesFor(prefix)
	_, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+t.rows+", "+t.jobs+", "+t.shadow)
	return err
}

// finalPG reads what the tables hold.
func finalPG(ctx context.Context, pool *pgxpool.Pool, prefix string) (chaoscheck.Final, error) {
	t := tablesFor(prefix)
	f := chaoscheck.Final{Fenced: map[string][]chaoscheck.Entry{}, Shadow: map[string][]chaoscheck.Entry{}}
	for _, q := range []struct {
		sql  string
		into map[string][]chaoscheck.Entry
	}{
		{"SELECT resource, job, fence, worker FROM " + t.jobs + " ORDER BY seq", f.Fenced},
		{"SELECT resource, job, 0, worker FROM " + t.shadow + " ORDER BY seq", f.Shadow},
	} {
		rows, err := pool.Query(ctx, q.sql)
		if err != nil {
			return f, fmt.Errorf("chaos: postgres final: %w", err)
		}
		for rows.Next() {
			var res string
			var e chaoscheck.Entry
			var fv int64
			if err := rows.Scan(&res, &e.Job, &fv, &e.Worker); err != nil {
				rows.Close()
				return f, fmt.Errorf("chaos: postgres final: %w", err)
			}
			e.Fence = uint64(fv)
			q.into[res] = append(q.into[res], e)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return f, fmt.Errorf("chaos: postgres final: %w", err)
		}
	}
	return f, nil
}

// pgBackend is a worker's PostgreSQL store: the fenced calls go through pgfence.Guard, each
// in one transaction with what it reads or records, so that the check, the read and the
// record are one step.
type pgBackend struct {
	pool *pgxpool.Pool
	t    pgTables
}

func dialPG(ctx context.Context, dsn, prefix string) (*pgBackend, error) {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("chaos: postgres: %w", err)
	}
	return &pgBackend{pool: pool, t: tablesFor(prefix)}, nil
}

func (b *pgBackend) Call(ctx context.Context, kind string, res string, f uint64, job int64, worker int) (Answer, error) {
	switch kind {
	case "shadow-read":
		var n int64
		err := b.pool.QueryRow(ctx, "SELECT count(*) FROM "+b.t.shadow+" WHERE resource = $1", res).Scan(&n)
		return Answer{Outcome: chaoscheck.OK, Job: n}, err
	case "shadow-write":
		_, err := b.pool.Exec(ctx, "INSERT INTO "+b.t.shadow+" (resource, job, worker) VALUES ($1, $2, $3)", res, job, worker)
		return Answer{Outcome: chaoscheck.OK}, err
	}
	var a Answer
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if kind == string(chaoscheck.Claim) {
			if _, err := b.t.guard.Claim(ctx, tx, f, "resource = $1", res); err != nil {
				return err
			}
			return tx.QueryRow(ctx, "SELECT next FROM "+b.t.rows+" WHERE resource = $1", res).Scan(&a.Job)
		}
		if _, err := b.t.guard.Update(ctx, tx, f, "next = next + 1", "resource = $1", res); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "INSERT INTO "+b.t.jobs+" (resource, job, fence, worker) VALUES ($1, $2, $3, $4)", res, job, int64(f), worker)
		return err
	})
	return guarded(a, err)
}
