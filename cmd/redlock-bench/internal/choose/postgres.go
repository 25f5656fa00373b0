package choose

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"quorumlock.dev/cmd/redlock-bench/internal/lockload"
	"quorumlock.dev/internal/harness/pgserver"
)

// pgOption is a row lock (SELECT ... FOR UPDATE NOWAIT in a transaction) on a table of one row
// per resource with a version column, on a throw-away PostgreSQL server. A write is guarded
// by the version its writer read: UPDATE ... WHERE version = $read.
type pgOption struct {
	srv *pgserver.Server
	dsn string
}

// lockNotAvailable is PostgreSQL's SQLSTATE for NOWAIT meeting a held lock.
const lockNotAvailable = "55P03"

// errVersionMoved is a guarded write that changed no row: another writer came after.
var errVersionMoved = errors.New("version column moved on: 0 rows updated")

func openPostgres(ctx context.Context, cfg Config) (_ *pgOption, err error) {
	srv, err := pgserver.Start(ctx, pgserver.Options{})
	if errors.Is(err, pgserver.ErrNotInstalled) {
		return nil, fmt.Errorf("%w: initdb and postgres (Debian package postgresql)", ErrNotInstalled)
	}
	if err != nil {
		return nil, err
	}
	o := &pgOption{srv: srv, dsn: srv.DSN("postgres")}
	defer func() {
		if err != nil {
			o.close()
		}
	}()
	conn, err := pgx.Connect(ctx, o.dsn)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, `CREATE TABLE choose_resource (id text PRIMARY KEY, version bigint NOT NULL DEFAULT 1, data text NOT NULL DEFAULT '')`)
	if err == nil {
		_, err = conn.Exec(ctx, `INSERT INTO choose_resource (id) SELECT 'choose:' || g FROM generate_series(0, $1::int - 1) g`, cfg.Keys)
	}
	if err != nil {
		return nil, fmt.Errorf("create table: %w", err)
	}
	return o, nil
}

func (o *pgOption) close() { _ = o.srv.Stop() }

func (o *pgOption) fence() string { return "version column (UPDATE ... WHERE version = read)" }

// A locker is one connection: a row lock lives in its transaction.
func (o *pgOption) locker(ctx context.Context, _ time.Duration) (lockload.Locker, error) {
	conn, err := pgx.Connect(ctx, o.dsn)
	if err != nil {
		return nil, err
	}
	return pgLocker{conn}, nil
}

type pgLocker struct{ conn *pgx.Conn }

func (l pgLocker) Close() { _ = l.conn.Close(context.Background()) }

// Acquire ignores ttl: a row lock has no lease, it lasts as long as its transaction.
func (l pgLocker) Acquire(ctx context.Context, key string, _ time.Duration) (func(context.Context) error, bool, error) {
	tx, err := lockRow(ctx, l.conn, key)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == lockNotAvailable {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return tx.Commit, true, nil
}

// lockRow begins a transaction on conn and locks key's row, at once or not at all.
func lockRow(ctx context.Context, conn *pgx.Conn, key string) (pgx.Tx, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, err
	}
	var version int64
	err = tx.QueryRow(ctx, `SELECT version FROM choose_resource WHERE id = $1 FOR UPDATE NOWAIT`, key).Scan(&version)
	if err != nil {
		_ = tx.Rollback(ctx)
		return nil, err
	}
	return tx, nil
}

// stale: the first holder's session has a lease, idle_in_transaction_session_timeout; paused
// past it, the server ends the session and its row lock. The next holder locks the row and
// writes; then the first writes, on its own connection if it still has one and else through
// a new one, as a pool would, with the version it read.
func (o *pgOption) stale(ctx context.Context, cfg Config) (bool, string, error) {
	key := "choose:0"
	var conns []*pgx.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close(context.WithoutCancel(ctx))
		}
	}()
	// Each holder's transaction and the version it read, by its number.
	txs, versions := map[uint64]pgx.Tx{}, map[uint64]int64{}
	take := func(ctx context.Context, setup string) (holder, error) {
		conn, err := pgx.Connect(ctx, o.dsn)
		if err != nil {
			return holder{}, err
		}
		conns = append(conns, conn)
		if _, err := conn.Exec(ctx, setup); err != nil {
			return holder{}, err
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			return holder{}, err
		}
		var version int64
		if err := tx.QueryRow(ctx, `SELECT version FROM choose_resource WHERE id = $1 FOR UPDATE`, key).Scan(&version); err != nil {
			return holder{}, err
		}
		h := holder{fence: uint64(len(txs) + 1), release: func(ctx context.Context) error { return tx.Rollback(ctx) }}
		txs[h.fence] = tx
		versions[h.fence] = version
		return h, nil
	}
	sc := staleCase{
		first: func(ctx context.Context) (holder, error) {
			return take(ctx, fmt.Sprintf("SET idle_in_transaction_session_timeout = %d", cfg.Lease.Milliseconds()))
		},
		pause: func(ctx context.Context) error { return sleepCtx(ctx, 2*cfg.Lease) },
		// The second holder waits for the row lock, at most for the experiment.
		second: func(ctx context.Context) (holder, error) { return take(ctx, "SET lock_timeout = '20s'") },
		write: func(ctx context.Context, h holder, v string) error {
			const update = `UPDATE choose_resource SET data = $2, version = version + 1 WHERE id = $1 AND version = $3`
			tag, err := txs[h.fence].Exec(ctx, update, key, v, versions[h.fence])
			if err == nil {
				err = txs[h.fence].Commit(ctx)
			}
			if err != nil {
				// The session is gone (or its transaction aborted): a new connection.
				conn, cerr := pgx.Connect(ctx, o.dsn)
				if cerr != nil {
					return errors.Join(err, cerr)
				}
				conns = append(conns, conn)
				if tag, err = conn.Exec(ctx, update, key, v, versions[h.fence]); err != nil {
					return err
				}
			}
			if tag.RowsAffected() == 0 {
				return errVersionMoved
			}
			return nil
		},
		read: func(ctx context.Context) (string, error) {
			conn, err := pgx.Connect(ctx, o.dsn)
			if err != nil {
				return "", err
			}
			conns = append(conns, conn)
			var data string
			err = conn.QueryRow(ctx, `SELECT data FROM choose_resource WHERE id = $1`, key).Scan(&data)
			return data, err
		},
	}
	return runStale(ctx, sc)
}

func (o *pgOption) failover(context.Context, Config) (string, error) {
	return "not run: one PostgreSQL server here, no standby to promote", nil
}
