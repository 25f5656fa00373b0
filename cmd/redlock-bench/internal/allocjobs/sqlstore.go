package allocjobs

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"quorumlock.dev/fence/sqlfence"
)

// SQLStore is the storage in MySQL, MariaDB or SQLite through database/sql, with the
// tables of [PGStore]: a stock table guarded by sqlfence.Guard and a shipments table without
// a unique constraint. It imports no driver: the program registers one. Its tables carry a
// prefix of their own and are dropped by Close, which leaves db open.
type SQLStore struct {
	db        *sql.DB
	dialect   sqlfence.Dialect
	prefix    string
	stock     string // quoted table names
	shipments string
	guard     sqlfence.Guard
	initial   int64 // units in stock after Setup
}

// NewSQLStore uses db, a MySQL (MariaDB too) or SQLite database as dialect says, with tables
// named <prefix>_stock and <prefix>_shipments; prefix is made of ASCII letters, digits and _.
func NewSQLStore(db *sql.DB, dialect sqlfence.Dialect, prefix string) *SQLStore {
	q := func(name string) string {
		if dialect == sqlfence.MySQL {
			return "`" + name + "`"
		}
		return `"` + name + `"`
	}
	return &SQLStore{
		db: db, dialect: dialect, prefix: prefix,
		stock:     q(prefix + "_stock"),
		shipments: q(prefix + "_shipments"),
		guard:     sqlfence.Guard{Dialect: dialect, Table: prefix + "_stock"},
	}
}

func (s *SQLStore) Setup(ctx context.Context, skus int, qty int64) error {
	if s.dialect != sqlfence.MySQL && s.dialect != sqlfence.SQLite {
		return fmt.Errorf("allocjobs: setup: dialect %v: want MySQL or SQLite", s.dialect)
	}
	migration, err := s.guard.Migration()
	if err != nil {
		return fmt.Errorf("allocjobs: setup: %w", err)
	}
	s.initial = int64(skus) * qty
	stmts := []string{
		"DROP TABLE IF EXISTS " + s.stock,
		"DROP TABLE IF EXISTS " + s.shipments,
	}
	// Not unique on order_id: a duplicate must be able to land, so that it can be counted.
	if s.dialect == sqlfence.MySQL {
		stmts = append(stmts,
			"CREATE TABLE "+s.stock+" (sku INT PRIMARY KEY, qty BIGINT NOT NULL) ENGINE=InnoDB",
			migration,
			"CREATE TABLE "+s.shipments+" (id BIGINT AUTO_INCREMENT PRIMARY KEY, order_id BIGINT NOT NULL, sku INT NOT NULL, fence BIGINT NOT NULL, INDEX (order_id)) ENGINE=InnoDB")
	} else {
		stmts = append(stmts,
			"CREATE TABLE "+s.stock+" (sku INTEGER PRIMARY KEY, qty INTEGER NOT NULL)",
			migration,
			"CREATE TABLE "+s.shipments+" (id INTEGER PRIMARY KEY, order_id INTEGER NOT NULL, sku INTEGER NOT NULL, fence INTEGER NOT NULL)",
			`CREATE INDEX "`+s.prefix+`_shipments_order" ON `+s.shipments+" (order_id)")
	}
	for _, q := range stmts {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("allocjobs: setup: %w", err)
		}
	}
	// Rows in batches: both dialects bound the placeholders of one statement.
	const batch = 500
	for first := 0; first < skus; first += batch {
		n := min(batch, skus-first)
		args := make([]any, 0, 2*n)
		for sku := first; sku < first+n; sku++ {
			args = append(args, sku, qty)
		}
		q := "INSERT INTO " + s.stock + " (sku, qty) VALUES " + strings.TrimSuffix(strings.Repeat("(?, ?), ", n), ", ")
		if _, err := s.db.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("allocjobs: setup: %w", err)
		}
	}
	return nil
}

func (s *SQLStore) Begin(ctx context.Context, sku int, order int64, f uint64) (bool, error) {
	if f != 0 {
		if _, err := s.guard.Claim(ctx, s.db, f, "sku = ?", sku); err != nil {
			return false, err
		}
	}
	var shipped bool
	err := s.db.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM "+s.shipments+" WHERE order_id = ?)", order).Scan(&shipped)
	return shipped, err
}

func (s *SQLStore) Ship(ctx context.Context, sku int, order int64, f uint64) (err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err == nil {
			return
		}
		if rerr := tx.Rollback(); rerr != nil && !errors.Is(rerr, sql.ErrTxDone) {
			err = errors.Join(err, rerr)
		}
	}()
	if f != 0 {
		if _, err := s.guard.Update(ctx, tx, f, "qty = qty - 1", "sku = ?", sku); err != nil {
			return err
		}
	} else if _, err := tx.ExecContext(ctx, "UPDATE "+s.stock+" SET qty = qty - 1 WHERE sku = ?", sku); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+s.shipments+" (order_id, sku, fence) VALUES (?, ?, ?)", order, sku, int64(f)); err != nil {
		return err
	}
	return tx.Commit()
}

func (s *SQLStore) Audit(ctx context.Context) (Audit, error) {
	var a Audit
	err := s.db.QueryRowContext(ctx, "SELECT count(*), count(DISTINCT order_id) FROM "+s.shipments).Scan(&a.Shipments, &a.Orders)
	if err != nil {
		return a, err
	}
	a.Duplicates = a.Shipments - a.Orders
	var left int64
	if err := s.db.QueryRowContext(ctx, "SELECT coalesce(sum(qty), 0) FROM "+s.stock).Scan(&left); err != nil {
		return a, err
	}
	a.Taken = s.initial - left
	return a, nil
}

// Close drops the store's tables.
func (s *SQLStore) Close() error {
	var errs []error
	for _, t := range []string{s.stock, s.shipments} {
		if _, err := s.db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+t); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
