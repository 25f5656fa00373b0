// Package chaosstore is the fenced store the chaos suite's workers write to: per resource a row
// that keeps the largest fence it has seen and the jobs recorded on it, and a shadow row that
// takes the same jobs without any check. It lives in the coordinating process, served over HTTP
// on loopback so that workers in other processes share it and survive one another's death, or
// in tables of the run's own: in PostgreSQL guarded by pgfence.Guard, in MySQL (or MariaDB) or
// SQLite guarded by sqlfence.Guard. [Start] makes a run's store and [Dial] is a worker's side of it. It records nothing of who called when: the workers do.
package chaosstore

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"quorumlock.dev/cmd/redlock-bench/internal/chaoscheck"
)

// The kinds of store of [Spec].
const (
	Memory   = "memory"
	Postgres = "postgres"
	MySQL    = "mysql"
	SQLite   = "sqlite"
)

// Spec says where a run's store lives: Kind is Memory (or ""), Postgres, MySQL (MariaDB too)
// or SQLite, and DSN the database: a PostgreSQL DSN, a github.com/go-sql-driver/mysql DSN, or
// an SQLite file ("": a file in a temporary dir of the store's own).
type Spec struct {
	Kind, DSN string
}

// Addr is where a worker finds the store: the memory store's base URL, or a database, its
// kind and the prefix of the run's tables.
type Addr struct {
	URL    string `json:"store,omitempty"`
	Kind   string `json:"store_kind,omitempty"`
	DSN    string `json:"store_dsn,omitempty"`
	Prefix string `json:"store_prefix,omitempty"`
}

// Store is a run's store: the memory store, or tables of the run's own in a database.
type Store struct {
	mem  *memStore     // nil in a database
	pg   *pgxpool.Pool // PostgreSQL's
	db   *sql.DB       // MySQL's or SQLite's
	dir  string        // SQLite's temporary dir, if the store made one
	addr Addr
}

// Start makes a run's store with a row for each of resources: in memory, or in tables of its
// own in the database spec names, which [Store.Close] drops.
func Start(ctx context.Context, spec Spec, resources []string) (*Store, error) {
	prefix := fmt.Sprintf("chaos_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9)
	switch spec.Kind {
	case "", Memory:
		m, err := startMemStore()
		if err != nil {
			return nil, err
		}
		return &Store{mem: m, addr: Addr{URL: m.url}}, nil
	case Postgres:
		pool, err := pgxpool.New(ctx, spec.DSN)
		if err != nil {
			return nil, fmt.Errorf("chaos: postgres: %w", err)
		}
		s := &Store{pg: pool, addr: Addr{Kind: Postgres, DSN: spec.DSN, Prefix: prefix}}
		if err := setupPG(ctx, pool, prefix, resources); err != nil {
			s.Close()
			return nil, err
		}
		return s, nil
	case MySQL, SQLite:
		s := &Store{addr: Addr{Kind: spec.Kind, DSN: spec.DSN, Prefix: prefix}}
		if spec.Kind == SQLite && spec.DSN == "" {
			dir, err := os.MkdirTemp("", "chaos-sqlite-")
			if err != nil {
				return nil, fmt.Errorf("chaos: sqlite: %w", err)
			}
			s.dir, s.addr.DSN = dir, filepath.Join(dir, "store.db")
		}
		var err error
		if s.db, err = openSQL(spec.Kind, s.addr.DSN); err == nil {
			err = setupSQL(ctx, s.db, tablesForSQL(spec.Kind, prefix), resources)
		}
		if err != nil {
			s.Close()
			return nil, err
		}
		return s, nil
	}
	return nil, fmt.Errorf("chaos: store %q: want %s, %s, %s or %s", spec.Kind, Memory, Postgres, MySQL, SQLite)
}

// Addr is where the workers find s.
func (s *Store) Addr() Addr { return s.addr }

// Final is what s holds.
func (s *Store) Final(ctx context.Context) (chaoscheck.Final, error) {
	switch {
	case s.mem != nil:
		return s.mem.final(), nil
	case s.pg != nil:
		return finalPG(ctx, s.pg, s.addr.Prefix)
	}
	return finalSQL(ctx, s.db, tablesForSQL(s.addr.Kind, s.addr.Prefix))
}

// Close stops the memory store, or drops the run's tables (and removes SQLite's temporary dir).
func (s *Store) Close() {
	switch {
	case s.mem != nil:
		s.mem.close()
	case s.pg != nil:
		_ = dropPG(context.Background(), s.pg, s.addr.Prefix)
		s.pg.Close()
	case s.db != nil:
		_ = dropSQL(context.Background(), s.db, tablesForSQL(s.addr.Kind, s.addr.Prefix))
		_ = s.db.Close()
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

// Answer is the store's reply to one call.
type Answer struct {
	Outcome chaoscheck.Outcome `json:"outcome"`
	Job     int64              `json:"job"`
}

// Backend is a worker's way to the store. Kind is a [chaoscheck.OpKind] (claim, write), or
// shadow-read or shadow-write; the answer's Outcome says whether the fence was accepted, and
// its Job is a claim's or a shadow read's next job. An error means no answer: the call may
// have taken effect.
type Backend interface {
	Call(ctx context.Context, kind string, res string, f uint64, job int64, worker int) (Answer, error)
}

// Dial returns a worker's way to the store at a.
func Dial(ctx context.Context, a Addr) (Backend, error) {
	switch a.Kind {
	case Postgres:
		return dialPG(ctx, a.DSN, a.Prefix)
	case MySQL, SQLite:
		return dialSQL(a)
	}
	return httpBackend{base: a.URL, http: &http.Client{}}, nil
}
