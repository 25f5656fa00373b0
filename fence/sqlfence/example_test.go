package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"

	"quorumlock.dev/fence"
	"quorumlock.dev/fence/sqlfence"
)

// A guarded update on MySQL or MariaDB (run it against your database): the row changes only
// if the writer's fence is not older than the row's.
func ExampleGuard_Update() {
	ctx := context.Background()
	var db *sql.DB        // sql.Open("mysql", dsn), with github.com/go-sql-driver/mysql imported
	var token uint64 = 42 // the lock's fence
	stock := sqlfence.Guard{Dialect: sqlfence.MySQL, Table: "inventory"}
	_, err := stock.Update(ctx, db, token, "qty = qty - ?", "sku = ?", 1, "WH-01")
	switch {
	case errors.Is(err, fence.ErrFenceRejected):
		// A newer holder has written: this lock is stale. Stop, do not retry.
	case errors.Is(err, sqlfence.ErrNoRow), errors.Is(err, sqlfence.ErrConflict):
		// Nothing written, nothing refused: read again, then decide.
	case err != nil:
		// The database failed, or the input was bad.
	}
}
