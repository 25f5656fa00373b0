package pgfence_test

import (
	"context"
	"errors"

	"quorumlock.dev/fence"
	"quorumlock.dev/fence/pgfence"
	"quorumlock.dev/redlock"
)

// pgfence.Counter mints for redlock.WithFence.
var _ redlock.Minter = (*pgfence.Counter)(nil)

// A guarded update (run it against your database): one
// statement that changes the row only if the writer's fence is not older
// than the row's.
func ExampleGuard_Update() {
	ctx := context.Background()
	var db pgfence.DB // a *pgxpool.Pool, *pgx.Conn or pgx.Tx
	var lock *redlock.Lock
	if db == nil || lock == nil {
		return // this example shows the calls; it needs a database and a lock to run
	}
	guard := pgfence.Guard{Table: "inventory"}
	token, _ := lock.Fence()
	// UPDATE "inventory" SET qty = qty - $1, "fence" = GREATEST("fence", $3) WHERE (sku = $2) AND "fence" <= $3
	_, err := guard.Update(ctx, db, token, "qty = qty - $1", "sku = $2", 1, "WH-01")
	switch {
	case errors.Is(err, fence.ErrFenceRejected):
		// a newer holder has written: this one's lock is stale; do not retry the write
	case errors.Is(err, pgfence.ErrNoRow):
		// no such SKU
	case errors.Is(err, pgfence.ErrConflict):
		// another transaction changed the row meanwhile: read it again and retry
	case err != nil:
		// the database failed
	}
}
