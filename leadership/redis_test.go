package leadership_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/driver"
	"quorumlock.dev/driver/goredis"
	"quorumlock.dev/fence"
	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
	"quorumlock.dev/leadership"
	"quorumlock.dev/redlock"
)

// TestResignHandoverRedis: on five real masters, the candidate that waits
// is elected right after the leader resigns, woken by the release's
// PUBLISH, not by the lease's expiry (10 s). What only real servers show:
// the subscription path of go-redis and the shipped scripts on Redis 7. The
// times are logged, not asserted below the TTL: they depend on the machine.
func TestResignHandoverRedis(t *testing.T) {
	servers := redistest.StartN(t, 6, redisserver.Options{})
	var masters []driver.Conn
	for _, s := range servers[:5] {
		masters = append(masters, goredis.Conn(redistest.Client(t, s.Addr())))
	}
	counter, err := fence.NewRedisCounter(goredis.Conn(redistest.Client(t, servers[5].Addr())))
	require.NoError(t, err)
	const ttl = 10 * time.Second
	candidate := func(id string) *leadership.Election {
		c, err := redlock.New(masters, redlock.WithFence(counter), redlock.WithNodeTimeout(200*time.Millisecond))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		e, err := leadership.New(c, "redis-handover", leadership.WithTTL(ttl), leadership.WithIdentity(id))
		require.NoError(t, err)
		return e
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b := candidate("a"), candidate("b")
	term, err := a.Campaign(ctx)
	require.NoError(t, err)
	const handovers = 10
	var took []time.Duration
	for i := range handovers {
		next := b
		if i%2 == 1 {
			next = a
		}
		got := make(chan *leadership.Term, 1)
		go func() {
			tn, err := next.Campaign(ctx)
			assert.NoError(t, err)
			got <- tn
		}()
		time.Sleep(100 * time.Millisecond) // the candidate is waiting by now, on a quiet machine
		info, err := next.Leader(ctx)
		require.NoError(t, err)
		assert.Equal(t, term.Identity(), info.Identity)
		start := time.Now()
		require.NoError(t, term.Resign(ctx))
		tn := <-got
		require.NotNil(t, tn)
		took = append(took, time.Since(start))
		assert.Greater(t, tn.Fence(), term.Fence())
		term = tn
	}
	require.NoError(t, term.Resign(ctx))
	slices.Sort(took)
	t.Logf("Resign to the next leader's election, %d handovers on 5 local masters: min %v, median %v, max %v",
		handovers, took[0], took[len(took)/2], took[len(took)-1])
	assert.Less(t, took[len(took)-1], ttl/2, "a handover waited for the lease's expiry: the release's push was lost")
}
