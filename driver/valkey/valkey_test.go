package valkey_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/driver"
	valkeydriver "quorumlock.dev/driver/valkey"
	"quorumlock.dev/internal/redisserver"
	"quorumlock.dev/internal/redistest"
)

// The adapter's own tests: what the conformance suite cannot ask of every
// adapter.

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestConnNil(t *testing.T) {
	assert.Nil(t, valkeydriver.Conn(nil))
	conns := valkeydriver.Masters(nil)
	require.Len(t, conns, 1)
	assert.Nil(t, conns[0], "a nil client stays nil at its index")
	assert.Nil(t, valkeydriver.Unwrap(nil))
}

func TestDescribe(t *testing.T) {
	srv := redistest.Start(t, redisserver.Options{})
	c := client(t, srv.Addr())
	conn := valkeydriver.Conn(c)
	assert.Same(t, c, valkeydriver.Unwrap(conn))

	d := driver.Describe(conn)
	assert.Equal(t, c, d.Client)
	assert.Equal(t, srv.Addr(), d.Addr)
	assert.Nil(t, d.Cluster)
	assert.Empty(t, d.Unsafe)
	assert.True(t, d.NeverRetries, "valkey sends SET and EVALSHA once")
	names := map[string]driver.Setting{}
	for _, s := range d.Settings {
		names[s.Name] = s
	}
	assert.Equal(t, "standalone", names["Mode"].Value)
	assert.Equal(t, "read-only commands only", names["retries"].Value)
	assert.False(t, names["retries"].Warn)
	assert.Contains(t, names["ConnWriteTimeout"].Why, "pipeline")

	_, ok := conn.(driver.Subscriber)
	assert.True(t, ok, "a standalone client has push wake-up")
	_, ok = conn.(driver.Inspector)
	assert.True(t, ok)
}

func TestEvalBadArgument(t *testing.T) {
	srv := redistest.Start(t, redisserver.Options{})
	conn := valkeydriver.Conn(client(t, srv.Addr()))
	raw := redistest.Client(t, srv.Addr())
	ctx := testCtx(t)
	_, err := conn.Eval(ctx, driver.NewScript("return redis.call('set', KEYS[1], ARGV[1])"), []string{"bad"}, 1.5)
	require.ErrorIs(t, err, valkeydriver.ErrArgument)
	assert.False(t, driver.Replied(err))
	assert.Zero(t, raw.Exists(ctx, "bad").Val(), "nothing was sent")
}

func TestSubscriptionLostConnection(t *testing.T) {
	srv := redistest.Start(t, redisserver.Options{})
	raw := redistest.Client(t, srv.Addr())
	sub := valkeydriver.Conn(client(t, srv.Addr())).(driver.Subscriber).Subscribe(t.Context())
	t.Cleanup(func() { _ = sub.Close() })
	ctx := testCtx(t)
	require.NoError(t, sub.Subscribe(ctx, "lost"))
	require.NoError(t, sub.Ping(ctx, "ready"))
	p, err := sub.Receive(ctx)
	require.NoError(t, err)
	require.Equal(t, driver.Push{Pong: true, Payload: "ready"}, p)

	killed, err := raw.ClientKillByFilter(ctx, "TYPE", "pubsub").Result()
	require.NoError(t, err)
	require.Equal(t, int64(1), killed)
	_, err = sub.Receive(ctx)
	require.Error(t, err, "the call that meets the lost connection reports it")
	assert.False(t, driver.Replied(err), "%v is not a reply", err)

	// The next call connects again, subscribed to the same channel.
	require.NoError(t, sub.Ping(ctx, "back"))
	p, err = sub.Receive(ctx)
	require.NoError(t, err)
	require.Equal(t, driver.Push{Pong: true, Payload: "back"}, p)
	require.Equal(t, int64(1), raw.Publish(ctx, "lost", "found").Val())
	p, err = sub.Receive(ctx)
	require.NoError(t, err)
	assert.Equal(t, driver.Push{Channel: "lost", Payload: "found"}, p)
}

func TestSubscribeNeedsNoIO(t *testing.T) {
	srv := redistest.Start(t, redisserver.Options{})
	raw := redistest.Client(t, srv.Addr())
	ctx := testCtx(t)
	conn := valkeydriver.Conn(client(t, srv.Addr()))
	clients := func() int {
		list, err := raw.ClientList(ctx).Result()
		require.NoError(t, err)
		return strings.Count(list, "\n")
	}
	before := clients()
	sub := conn.(driver.Subscriber).Subscribe(ctx)
	assert.Equal(t, before, clients(), "no connection before the first call")
	require.NoError(t, sub.Ping(ctx, "now"))
	assert.Equal(t, before+1, clients(), "a dedicated connection at the first call")
	require.NoError(t, sub.Close())
	assert.Error(t, sub.Subscribe(ctx, "closed"), "a closed subscription sends nothing")
}
