package leadership_test

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"quorumlock.dev/driver"
	"quorumlock.dev/fence"
	"quorumlock.dev/fence/pgfence"
	"quorumlock.dev/leadership"
)

// An outbox relay: one process at a time moves the messages of the
// outbox table (id, payload, sent, fence) to an inbox on Redis. Every write
// carries the term's fence, so that a relay deposed without knowing it (a
// pause, a partition) has its writes refused by the database and the
// inbox instead of sending a message twice. Run it against your own
// database and servers.
func Example_outboxRelay() {
	ctx := context.Background()
	var (
		election *leadership.Election // leadership.New(client, "outbox-relay", leadership.WithHealth(...)); the client has redlock.WithFence and redlock.WithFairness
		db       pgfence.DB           // the outbox's database: a *pgxpool.Pool
		inbox    driver.Conn          // where messages go: goredis.Conn(rdb)
	)
	if election == nil || db == nil || inbox == nil {
		return // this example shows the calls; it needs servers to run
	}
	for ctx.Err() == nil {
		term, err := election.Campaign(ctx)
		if err != nil {
			time.Sleep(time.Second) // masters or the fence counter unreachable: try again
			continue
		}
		err = relay(term, db, inbox)
		switch {
		case errors.Is(err, fence.ErrFenceRejected):
			// a newer term has written: this one is over, whatever its context says
		case err != nil:
			// the database or the inbox failed; the next term retries the message
		}
		_ = term.Resign(ctx)
	}
}

// relay sends the outbox's messages in order while term lasts. A message
// is claimed before it is sent: from then on the writes of any older term
// to its row are refused.
func relay(term *leadership.Term, db pgfence.DB, inbox driver.Conn) error {
	ctx := term.Context() // ends before another relay can be elected
	outbox := pgfence.Guard{Table: "outbox"}
	delivered := fence.RedisGuard{}
	for {
		var id int64
		var payload string
		err := db.QueryRow(ctx, `SELECT id, payload FROM outbox WHERE NOT sent ORDER BY id LIMIT 1`).Scan(&id, &payload)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			term.Progress() // idle but healthy
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(100 * time.Millisecond):
			}
			continue
		case err != nil:
			return err
		}
		if _, err := outbox.Claim(ctx, db, term.Fence(), "id = $1", id); err != nil {
			return err
		}
		// One key per message: a newer term that sends it again overwrites
		// it, an older one is refused.
		if err := delivered.Set(ctx, inbox, "inbox:"+strconv.FormatInt(id, 10), payload, term.Fence(), 0); err != nil {
			return err
		}
		if _, err := outbox.Update(ctx, db, term.Fence(), "sent = true", "id = $1", id); err != nil {
			return err
		}
		term.Progress()
	}
}
