package allocjobs

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/cmd/redlock-bench/internal/embeddedredis"
	"quorumlock.dev/fence"
	"quorumlock.dev/internal/harness/pgtest"
	"quorumlock.dev/redlock"

	"quorumlock.dev/driver"

	"quorumlock.dev/driver/goredis"
)

// startEmbedded is an in-process Redis whose keys expire in real time:
// a paused holder's lease must really lapse.
func startEmbedded(t *testing.T) *embeddedredis.Server {
	t.Helper()
	s, err := embeddedredis.Start()
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

func lockClient(t *testing.T, fenced bool) *redlock.Client {
	t.Helper()
	srv := startEmbedded(t)
	master := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 64})
	t.Cleanup(func() { _ = master.Close() })
	// A 25 ms node timeout and 5 ms retries: with 10 ms and 1 ms under
	// -race on two loaded cores, calls timed out, their undo and the quick
	// retries loaded the server further, and one run took 131 s instead of 3.
	opts := []redlock.Option{redlock.WithRetry(0, 5*time.Millisecond, 5*time.Millisecond), redlock.WithNodeTimeout(25 * time.Millisecond)}
	if fenced {
		counterSrv := startEmbedded(t)
		node := redis.NewClient(&redis.Options{Addr: counterSrv.Addr(), PoolSize: 64})
		t.Cleanup(func() { _ = node.Close() })
		counter, err := fence.NewRedisCounter(goredis.Conn(node))
		require.NoError(t, err)
		opts = append(opts, redlock.WithFence(counter))
	}
	c, err := redlock.New([]driver.Conn{goredis.Conn(master)}, opts...)
	require.NoError(t, err)
	return c
}

// proofConfig pauses a holder ten times its lease: the redelivered job must
// be locked and shipped by another worker before the paused one writes, and
// with a pause of 80 ms a slow CI machine shipped all 26 redeliveries after
// their paused holders (no duplicate to observe).
var proofConfig = Config{
	Jobs: 3000, SKUs: 40, Workers: 16, TTL: 60 * time.Millisecond, Pause: 600 * time.Millisecond,
	PauseRate: 0.01, Seed: 7, Stock: 1_000_000,
}

// TestUnfencedDuplicates: without the fence, holders paused past their
// lease ship orders that were shipped already. The failure the incident review warns
// about is observed here, not assumed.
func TestUnfencedDuplicates(t *testing.T) {
	if testing.Short() {
		t.Skip("a load run: skipped with -short")
	}
	res, err := Run(context.Background(), proofConfig, lockClient(t, false), NewMemoryStore())
	require.NoError(t, err)
	t.Logf("%+v", res)
	assert.Equal(t, "unfenced", res.Mode)
	assert.Positive(t, res.Pauses)
	assert.Positive(t, res.Duplicates, "paused holders must have shipped twice")
	assert.Zero(t, res.Rejections)
	assert.Zero(t, res.Errors)
	assert.Equal(t, proofConfig.Jobs, res.Orders, "every order shipped")
}

// TestFencedNoDuplicates: the same jobs, the same pauses, with the fence:
// every stale write is refused, no order ships twice.
func TestFencedNoDuplicates(t *testing.T) {
	if testing.Short() {
		t.Skip("a load run: skipped with -short")
	}
	res, err := Run(context.Background(), proofConfig, lockClient(t, true), NewMemoryStore())
	require.NoError(t, err)
	t.Logf("%+v", res)
	assert.Equal(t, "fenced", res.Mode)
	assert.Positive(t, res.Pauses)
	assert.Zero(t, res.Duplicates)
	assert.Positive(t, res.Rejections, "the paused holders' writes must have been refused")
	assert.Zero(t, res.Errors)
	assert.Equal(t, proofConfig.Jobs, res.Orders, "every order shipped")
	assert.Equal(t, proofConfig.Jobs, res.Shipments)
}

// TestDoneCountsEachJobOnce: Config.Done, a progress display's count, is
// called once per job, redeliveries of a paused holder's job not counted.
func TestDoneCountsEachJobOnce(t *testing.T) {
	cfg := proofConfig
	cfg.Jobs, cfg.PauseRate, cfg.Pause = 400, 0.05, 200*time.Millisecond
	var done atomic.Int64
	cfg.Done = func() { done.Add(1) }
	res, err := Run(context.Background(), cfg, lockClient(t, false), NewMemoryStore())
	require.NoError(t, err)
	assert.Positive(t, res.Redelivered, "some jobs were handed out twice")
	assert.Equal(t, cfg.Jobs, done.Load())
}

func TestBadLockSettingsFailTheRun(t *testing.T) {
	cfg := proofConfig
	cfg.TTL, cfg.Pause = 5*time.Millisecond, 20*time.Millisecond // below the node timeout
	_, err := Run(context.Background(), cfg, lockClient(t, false), NewMemoryStore())
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
}

func TestConfigValidate(t *testing.T) {
	bad := []Config{
		{},
		{Jobs: 1, SKUs: 0, Workers: 1, TTL: time.Second},
		{Jobs: 1, SKUs: 1, Workers: 0, TTL: time.Second},
		{Jobs: 1, SKUs: 1, Workers: 1, TTL: 0},
		{Jobs: 1, SKUs: 1, Workers: 1, TTL: time.Second, PauseRate: 2},
		{Jobs: 1, SKUs: 1, Workers: 1, TTL: time.Second, PauseRate: 0.1, Pause: time.Second},
	}
	for _, c := range bad {
		assert.Error(t, c.Validate(), "%+v", c)
	}
	assert.NoError(t, proofConfig.Validate())
}

// TestPGStoreProof: the same proof on PostgreSQL, with the guard's SQL.
func TestPGStoreProof(t *testing.T) {
	if testing.Short() {
		t.Skip("a load run: skipped with -short")
	}
	pool := pgtest.Pool(t, pgtest.NewDatabase(t, pgtest.Shared(t)))
	cfg := proofConfig
	cfg.Jobs = 1500
	for _, fenced := range []bool{false, true} {
		store := NewPGStore(pool, "proof")
		res, err := Run(context.Background(), cfg, lockClient(t, fenced), store)
		require.NoError(t, err)
		t.Logf("%+v", res)
		audit, err := store.Audit(context.Background())
		require.NoError(t, err)
		assert.Equal(t, audit.Shipments, audit.Taken, "every shipment took one unit")
		require.NoError(t, store.Close())
		assert.Positive(t, res.Pauses)
		assert.Equal(t, cfg.Jobs, res.Orders)
		assert.Zero(t, res.Errors, res.FirstError)
		if fenced {
			assert.Zero(t, res.Duplicates)
			assert.Positive(t, res.Rejections)
		} else {
			assert.Positive(t, res.Duplicates)
		}
	}
}
