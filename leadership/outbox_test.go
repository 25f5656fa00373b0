package leadership_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/fence"
	"quorumlock.dev/fence/pgfence"
	"quorumlock.dev/internal/harness/pgtest"
	"quorumlock.dev/leadership"
)

// TestOutboxRelayPostgres runs the example's relay on a real PostgreSQL (the
// SQL of the example is checked only there), with in-memory masters and
// inbox in real time: a first leader relays the outbox and resigns, the
// next relays a new message, and the first one's late writes to that
// message, in the table and in the inbox, are refused.
func TestOutboxRelayPostgres(t *testing.T) {
	pool := pgtest.Pool(t, pgtest.NewDatabase(t, pgtest.Shared(t)))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, err := pool.Exec(ctx, `CREATE TABLE outbox (id bigint PRIMARY KEY, payload text NOT NULL,
		sent boolean NOT NULL DEFAULT false, fence bigint NOT NULL DEFAULT 0)`)
	require.NoError(t, err)
	add := func(id int) {
		_, err := pool.Exec(ctx, `INSERT INTO outbox (id, payload) VALUES ($1, $2)`, id, "message "+strconv.Itoa(id))
		require.NoError(t, err)
	}
	pending := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE NOT sent`).Scan(&n))
		return n
	}
	for id := 1; id <= 5; id++ {
		add(id)
	}
	c := newCluster(t, 3)
	inbox := c.store.Conn()
	a, b := c.candidate(t, "a"), c.candidate(t, "b")

	// lead runs the relay in a term until the outbox is empty, then resigns.
	lead := func(e *leadership.Election) *leadership.Term {
		term, err := e.Campaign(ctx)
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- relay(term, pool, inbox) }()
		for pending() > 0 {
			select {
			case err := <-done:
				t.Fatalf("the relay stopped with messages left: %v", err)
			case <-time.After(20 * time.Millisecond):
			}
		}
		require.NoError(t, term.Resign(ctx))
		err = <-done
		assert.True(t, errors.Is(err, leadership.ErrResigned) || errors.Is(err, context.Canceled), "relay: %v", err)
		return term
	}
	ta := lead(a)
	for id := 1; id <= 5; id++ {
		v, f, err := fence.RedisGuard{}.Get(ctx, inbox, "inbox:"+strconv.Itoa(id))
		require.NoError(t, err)
		assert.Equal(t, "message "+strconv.Itoa(id), v)
		assert.Equal(t, ta.Fence(), f)
	}

	add(6)
	tb := lead(b)
	require.Greater(t, tb.Fence(), ta.Fence())
	// a, deposed, writes message 6 late with its old fence.
	_, err = pgfence.Guard{Table: "outbox"}.Update(ctx, pool, ta.Fence(), "payload = 'stale'", "id = $1", 6)
	assert.ErrorIs(t, err, fence.ErrFenceRejected)
	err = fence.RedisGuard{}.Set(ctx, inbox, "inbox:6", "stale", ta.Fence(), 0)
	assert.ErrorIs(t, err, fence.ErrFenceRejected)
	v, f, err := fence.RedisGuard{}.Get(ctx, inbox, "inbox:6")
	require.NoError(t, err)
	assert.Equal(t, "message 6", v)
	assert.Equal(t, tb.Fence(), f)
	var payload string
	require.NoError(t, pool.QueryRow(ctx, `SELECT payload FROM outbox WHERE id = 6`).Scan(&payload))
	assert.Equal(t, "message 6", payload)
}
