package allocjobs

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"quorumlock.dev/fence/pgfence"
)

// PGStore is the PostgreSQL storage: a stock table guarded by
// pgfence.Guard and a shipments table without a unique constraint, so that
// a duplicate shows as a second row. Its tables carry a prefix of their own
// and are dropped by Close.
type PGStore struct {
	pool      *pgxpool.Pool
	stock     string // quoted table names
	shipments string
	guard     pgfence.Guard
	initial   int64 // units in stock after Setup
}

// NewPGStore uses pool, with tables named <prefix>_stock and
// <prefix>_shipments.
func NewPGStore(pool *pgxpool.Pool, prefix string) *PGStore {
	return &PGStore{
		pool:      pool,
		stock:     pgx.Identifier{prefix + "_stock"}.Sanitize(),
		shipments: pgx.Identifier{prefix + "_shipments"}.Sanitize(),
		guard:     pgfence.Guard{Table: prefix + "_stock"},
	}
}

func (s *PGStore) Setup(ctx context.Context, skus int, qty int64) error {
	s.initial = int64(skus) * qty
	stmts := []string{
		"DROP TABLE IF EXISTS " + s.stock + ", " + s.shipments,
		"CREATE TABLE " + s.stock + " (sku int PRIMARY KEY, qty bigint NOT NULL)",
		s.guard.Migration(),
		"CREATE TABLE " + s.shipments + " (id bigserial PRIMARY KEY, order_id bigint NOT NULL, sku int NOT NULL, fence bigint NOT NULL)",
		// Not unique: a duplicate must be able to land, so that it can be counted.
		"CREATE INDEX ON " + s.shipments + " (order_id)",
		"INSERT INTO " + s.stock + " (sku, qty) SELECT g, $1 FROM generate_series(0, $2 - 1) AS g",
	}
	for _, q := range stmts {
		var err error
		if q == stmts[len(stmts)-1] {
			_, err = s.pool.Exec(ctx, q, qty, skus)
		} else {
			_, err = s.pool.Exec(ctx, q)
		}
		if err != nil {
			return fmt.Errorf("allocjobs: setup: %w", err)
		}
	}
	return nil
}

func (s *PGStore) Begin(ctx context.Context, sku int, order int64, f uint64) (bool, error) {
	if f != 0 {
		if _, err := s.guard.Claim(ctx, s.pool, f, "sku = $1", sku); err != nil {
			return false, err
		}
	}
	var shipped bool
	err := s.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+s.shipments+" WHERE order_id = $1)", order).Scan(&shipped)
	return shipped, err
}

func (s *PGStore) Ship(ctx context.Context, sku int, order int64, f uint64) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if f != 0 {
			if _, err := s.guard.Update(ctx, tx, f, "qty = qty - 1", "sku = $1", sku); err != nil {
				return err
			}
		} else if _, err := tx.Exec(ctx, "UPDATE "+s.stock+" SET qty = qty - 1 WHERE sku = $1", sku); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "INSERT INTO "+s.shipments+" (order_id, sku, fence) VALUES ($1, $2, $3)", order, sku, int64(f))
		return err
	})
}

func (s *PGStore) Audit(ctx context.Context) (Audit, error) {
	var a Audit
	err := s.pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT order_id) FROM "+s.shipments).Scan(&a.Shipments, &a.Orders)
	if err != nil {
		return a, err
	}
	a.Duplicates = a.Shipments - a.Orders
	var left int64
	if err := s.pool.QueryRow(ctx, "SELECT coalesce(sum(qty), 0) FROM "+s.stock).Scan(&left); err != nil {
		return a, err
	}
	a.Taken = s.initial - left
	return a, nil
}

// Close drops the store's tables.
func (s *PGStore) Close() error {
	_, err := s.pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+s.stock+", "+s.shipments)
	return err
}
