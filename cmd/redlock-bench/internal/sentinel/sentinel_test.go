package sentinel

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
)

// testTimeout bounds each test's work with room for a loaded machine under -race: a start
// takes a few seconds with three sentinels, a failover one or two.
const testTimeout = 60 * time.Second

func start(t *testing.T, opt Options) *Group {
	t.Helper()
	redistest.Need(t)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	began := time.Now()
	g, err := Start(ctx, opt)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, g.Stop()) })
	t.Logf("%d sentinel(s) ready after %v", len(g.SentinelAddrs()), time.Since(began).Round(time.Millisecond))
	return g
}

// failoverClient is the client the chaos scenario gives the lock for the group.
func failoverClient(t *testing.T, g *Group) *redis.Client {
	t.Helper()
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            g.MasterName(),
		SentinelAddrs:         g.SentinelAddrs(),
		DialTimeout:           time.Second,
		ReadTimeout:           2 * time.Second,
		WriteTimeout:          2 * time.Second,
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// setAcked sets key on the primary and returns how many replicas acknowledged the write
// within wait; the pipeline keeps WAIT on the SET's connection, whose writes it counts.
func setAcked(ctx context.Context, t *testing.T, c *redis.Client, key string, wait time.Duration) int64 {
	t.Helper()
	var acked *redis.Cmd
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, key, "v", 0)
		acked = p.Do(ctx, "wait", 1, wait.Milliseconds())
		return nil
	})
	require.NoError(t, err)
	n, err := acked.Int64()
	require.NoError(t, err)
	return n
}

// failover kills the primary and waits for the promotion, checking what the group reports.
func failover(ctx context.Context, t *testing.T, g *Group) {
	t.Helper()
	old, err := g.PrimaryAddr(ctx)
	require.NoError(t, err)
	began := time.Now()
	require.NoError(t, g.KillPrimary(ctx))
	now, err := g.WaitFailover(ctx)
	require.NoError(t, err)
	t.Logf("failover from %s to %s took %v", old, now, time.Since(began).Round(time.Millisecond))
	assert.NotEqual(t, old, now)
	got, err := g.PrimaryAddr(ctx)
	require.NoError(t, err)
	assert.Equal(t, now, got, "every sentinel names the promoted replica")
	assert.Error(t, g.KillPrimary(ctx), "a group fails over once")
	assert.Error(t, g.PauseReplication(ctx), "no replica is left")
}

func TestFailover(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 3} {
		t.Run(strconv.Itoa(n)+" sentinels", func(t *testing.T) {
			t.Parallel()
			g := start(t, Options{Sentinels: n})
			ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
			defer cancel()
			require.Len(t, g.SentinelAddrs(), n)
			c := failoverClient(t, g)
			require.EqualValues(t, 1, setAcked(ctx, t, c, "before", 5*time.Second))

			failover(ctx, t, g)
			got, err := c.Get(ctx, "before").Result()
			require.NoError(t, err, "the client follows the failover")
			assert.Equal(t, "v", got, "a write the replica acknowledged survives")
			require.NoError(t, c.Set(ctx, "after", "v", 0).Err(), "the new primary takes writes")
		})
	}
}

func TestLostWrite(t *testing.T) {
	t.Parallel()
	g := start(t, Options{})
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	c := failoverClient(t, g)
	require.EqualValues(t, 1, setAcked(ctx, t, c, "kept", 5*time.Second))

	require.NoError(t, g.PauseReplication(ctx))
	assert.EqualValues(t, 0, setAcked(ctx, t, c, "lost", 200*time.Millisecond),
		"the primary acknowledged the write, the replica did not")
	failover(ctx, t, g)

	got, err := c.Get(ctx, "kept").Result()
	require.NoError(t, err)
	assert.Equal(t, "v", got)
	assert.ErrorIs(t, c.Get(ctx, "lost").Err(), redis.Nil, "the promoted replica never had the write")
	require.NoError(t, c.Set(ctx, "lost", "again", 0).Err(), "KillPrimary resumed the replica")
	assert.NoError(t, g.ResumeReplication(ctx), "after KillPrimary, nothing to do")
}

func TestResumeReplication(t *testing.T) {
	t.Parallel()
	g := start(t, Options{})
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	replica := redistest.Client(t, g.replica.Addr())

	require.NoError(t, g.PauseReplication(ctx))
	require.NoError(t, g.PauseReplication(ctx), "pausing twice")
	assert.EqualValues(t, 0, setAcked(ctx, t, failoverClient(t, g), "held", 200*time.Millisecond))
	assert.ErrorIs(t, replica.Get(ctx, "held").Err(), redis.Nil, "the replica holds the write")
	require.NoError(t, replica.Ping(ctx).Err(), "and answers other commands")

	require.NoError(t, g.ResumeReplication(ctx))
	assert.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := replica.Get(ctx, "held").Result()
		assert.NoError(c, err)
		assert.Equal(c, "v", got)
	}, 10*time.Second, 20*time.Millisecond, "the held write is applied")
}

func TestStop(t *testing.T) {
	t.Parallel()
	g := start(t, Options{Sentinels: 3})
	pids := []int{g.primary.Pid(), g.replica.Pid()}
	for _, p := range g.sentinels {
		pids = append(pids, p.Pid())
	}
	require.NoError(t, g.PauseReplication(t.Context()), "a paused replica stops too")
	require.NoError(t, g.Stop())
	require.NoError(t, g.Stop(), "Stop twice")
	for _, pid := range pids {
		assert.NoFileExists(t, "/proc/"+strconv.Itoa(pid)+"/stat", "process %d", pid)
	}
	assert.NoDirExists(t, g.dir)
}

func TestStartInvalidOptions(t *testing.T) {
	t.Parallel()
	for _, opt := range []Options{{Sentinels: -1}, {DownAfter: -time.Second}} {
		_, err := Start(t.Context(), opt)
		assert.ErrorContains(t, err, "sentinel: invalid options", "%+v", opt)
	}
}

func TestStartWithoutRedis(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := Start(t.Context(), Options{})
	assert.ErrorIs(t, err, redisserver.ErrNotInstalled)
}
