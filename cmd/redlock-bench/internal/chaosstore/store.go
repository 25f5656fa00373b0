// Package chaosstore is the fenced store the chaos suite's workers write to: per resource a row
// that keeps the largest fence it has seen and the jobs recorded on it, and a shadow row that
// takes the same jobs without any check. It lives in the coordinating process, served over HTTP
// on loopback so that workers in other processes share it and survive one another's death, or
// in PostgreSQL tables of the run's own guarded by pgfence.Guard. [Start] makes a run's store and
// [Dial] is a worker's side of it. It records nothing of who called when: the workers do.
package chaosstore

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"quorumlock.dev/cmd/redlock-bench/internal/chaoscheck"
)

// Addr is where a worker finds the store: the memory store's base URL, or a PostgreSQL
// database and the prefix of the run's tables.
type Addr struct {
	URL      string `json:"store"`
	PGDSN    string `json:"pg_dsn"`
	PGPrefix string `json:"pg_prefix"`
}

// Store is a run's store: the memory store, or tables of the run's own in PostgreSQL.
type Store struct {
	mem  *memStore     // nil with PostgreSQL
	pg   *pgxpool.Pool // nil with the memory store
	addr Addr
}

// Start makes a run's store with a row for each of resources: in memory when dsn is "", else
// in tables of its own in the PostgreSQL database dsn, which [Store.Close] drops.
func Start(ctx context.Context, dsn string, resources []string) (*Store, error) {
	if dsn == "" {
		m, err := startMemStore()
		if err != nil {
			return nil, err
		}
		return &Store{mem: m, addr: Addr{URL: m.url}}, nil
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("chaos: postgres: %w", err)
	}
	s := &Store{pg: pool, addr: Addr{PGDSN: dsn, PGPrefix: fmt.Sprintf("chaos_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9)}}
	if err := setupPG(ctx, pool, s.addr.PGPrefix, resources); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Addr is where the workers find s.
func (s *Store) Addr() Addr { return s.addr }

// Final is what s holds.
func (s *Store) Final(ctx context.Context) (chaoscheck.Final, error) {
	if s.mem != nil {
		return s.mem.final(), nil
	}
	return finalPG(ctx, s.pg, s.addr.PGPrefix)
}

// Close stops the memory store, or drops the run's tables.
func (s *Store) Close() {
	if s.mem != nil {
		s.mem.close()
		return
	}
	_ = dropPG(context.Background(), s.pg, s.addr.PGPrefix)
	s.pg.Close()
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
	if a.PGDSN != "" {
		return dialPG(ctx, a.PGDSN, a.PGPrefix)
	}
	return httpBackend{base: a.URL, http: &http.Client{}}, nil
}
