package allocjobs

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/internal/harness/faultproxy"
	"quorumlock.dev/redlock"

	"quorumlock.dev/driver"

	"quorumlock.dev/driver/goredis"
)

// hungMaster is the address of a Redis that accepts connections and never
// answers: a stopped server, through the fault proxy.
func hungMaster(t *testing.T) string {
	t.Helper()
	p, err := faultproxy.New(miniredis.RunT(t).Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	p.Hang()
	return p.Addr()
}

// TestRunStalls: a run whose only master never answers, with retries until
// the context ends, stops with ErrStalled once no delivery has finished for
// the stall window, instead of retrying for ever.
func TestRunStalls(t *testing.T) {
	master := redis.NewClient(&redis.Options{Addr: hungMaster(t), MaxRetries: -1})
	t.Cleanup(func() { _ = master.Close() })
	c, err := redlock.New([]driver.Conn{goredis.Conn(master)},
		redlock.WithRetry(0, time.Millisecond, time.Millisecond), redlock.WithNodeTimeout(10*time.Millisecond))
	require.NoError(t, err)
	cfg := Config{Jobs: 20, SKUs: 4, Workers: 4, TTL: 100 * time.Millisecond, Stock: 100, Stall: 500 * time.Millisecond}

	start := time.Now()
	res, err := Run(context.Background(), cfg, c, NewMemoryStore())
	elapsed := time.Since(start)
	require.ErrorIs(t, err, ErrStalled)
	assert.Contains(t, err.Error(), "no delivery finished in 500ms")
	assert.Zero(t, res.Shipments)
	assert.Less(t, elapsed, 20*time.Second, "the stall window did not end the run")
	t.Logf("stalled after %v: %v", elapsed, err)
}

func TestStallValidate(t *testing.T) {
	c := Config{Jobs: 1, SKUs: 1, Workers: 1, TTL: time.Second, Stall: -time.Second}
	assert.Error(t, c.Validate())
	assert.Equal(t, 10*time.Second, DefaultStall(30*time.Millisecond, 80*time.Millisecond))
	assert.Equal(t, 20*time.Second, DefaultStall(500*time.Millisecond, 500*time.Millisecond))
}
