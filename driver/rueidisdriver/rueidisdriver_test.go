package rueidisdriver_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/driver"
	"quorumlock.dev/driver/rueidisdriver"
	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
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
	assert.Nil(t, rueidisdriver.Conn(nil))
	conns := rueidisdriver.Masters(nil)
	require.Len(t, conns, 1)
	assert.Nil(t, conns[0], "a nil client stays nil at its index")
	assert.Nil(t, rueidisdriver.Unwrap(nil))
}

func TestDescribe(t *testing.T) {
	srv := redistest.Start(t, redisserver.Options{})
	c := client(t, srv.Addr())
	conn := rueidisdriver.Conn(c)
	assert.Same(t, c, rueidisdriver.Unwrap(conn))

	d := driver.Describe(conn)
	assert.Equal(t, c, d.Client)
	assert.Equal(t, srv.Addr(), d.Addr)
	assert.Nil(t, d.Cluster)
	assert.Empty(t, d.Unsafe)
	assert.True(t, d.NeverRetries, "rueidis sends SET and EVALSHA once")
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
	conn := rueidisdriver.Conn(client(t, srv.Addr()))
	raw := redistest.Client(t, srv.Addr())
	ctx := testCtx(t)
	_, err := conn.Eval(ctx, driver.NewScript("return redis.call('set', KEYS[1], ARGV[1])"), []string{"bad"}, 1.5)
	require.ErrorIs(t, err, rueidisdriver.ErrArgument)
	assert.False(t, driver.Replied(err))
	assert.Zero(t, raw.Exists(ctx, "bad").Val(), "nothing was sent")
}

func TestSubscriptionLostConnection(t *testing.T) {
	srv := redistest.Start(t, redisserver.Options{})
	raw := redistest.Client(t, srv.Addr())
	sub := rueidisdriver.Conn(client(t, srv.Addr())).(driver.Subscriber).Subscribe(t.Context())
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
	conn := rueidisdriver.Conn(client(t, srv.Addr()))
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

// TestDownAtStart: with ForceSingleClient, rueidis returns a client even
// when its server refuses the first dial. A lock command to it then fails
// with the dial's error, which proves it was never sent.
func TestDownAtStart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
	require.Error(t, err, "the first dial is refused")
	require.NotNil(t, c, "and the client is made all the same")
	t.Cleanup(c.Close)
	conn := rueidisdriver.Conn(c)
	assert.Equal(t, addr, driver.Describe(conn).Addr)

	ctx := testCtx(t)
	_, err = conn.SetNX(ctx, "k", "v", time.Hour)
	require.Error(t, err)
	assert.False(t, driver.Replied(err), "%v is not a reply", err)
	var op *net.OpError
	require.ErrorAs(t, err, &op, "a refused dial stays a *net.OpError")
	assert.Equal(t, "dial", op.Op)
	assert.True(t, driver.Describe(conn).NeverRetries)

	_, err = conn.Eval(ctx, driver.NewScript("return 1"), nil)
	require.ErrorAs(t, err, &op)
	assert.Equal(t, "dial", op.Op)
}

// TestCluster: a one-node Redis Cluster, which rueidis detects. The
// adapter says what a cluster client cannot do.
func TestCluster(t *testing.T) {
	srv := redistest.Start(t, redisserver.Options{Args: []string{"--cluster-enabled", "yes"}})
	raw := redistest.Client(t, srv.Addr())
	ctx := testCtx(t)
	require.NoError(t, raw.Do(ctx, "cluster", "addslotsrange", 0, 16383).Err())
	for {
		info, err := raw.ClusterInfo(ctx).Result()
		require.NoError(t, err)
		if strings.Contains(info, "cluster_state:ok") {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the cluster did not come up: %s", info)
		case <-time.After(50 * time.Millisecond):
		}
	}
	c := client(t, srv.Addr())
	require.Equal(t, rueidis.ClientModeCluster, c.Mode())
	conn := rueidisdriver.Conn(c)

	_, ok := conn.(driver.Subscriber)
	assert.False(t, ok, "no push wake-up for a cluster client")
	d := driver.Describe(conn)
	assert.Equal(t, []string{srv.Addr()}, d.Cluster)
	assert.Empty(t, d.Addr)
	assert.False(t, d.NeverRetries, "a cluster client follows redirects")
	assert.Equal(t, "cluster "+srv.Addr(), d.Label())
	for _, s := range d.Settings {
		if s.Name == "retries" {
			assert.True(t, s.Warn)
		}
	}

	ok, err := conn.SetNX(ctx, "lock:{c}a", "v", time.Hour)
	require.NoError(t, err)
	assert.True(t, ok)
	v, err := conn.Eval(ctx, driver.NewScript("return redis.call('get', KEYS[1])"), []string{"lock:{c}a"})
	require.NoError(t, err)
	assert.Equal(t, "v", v)
}

// TestSubscriptionCloseHung: Close on a server that stopped answering ends
// the Receive that waits at once, and returns itself once rueidis has given
// the connection up (ConnWriteTimeout).
func TestSubscriptionCloseHung(t *testing.T) {
	srv := redistest.Start(t, redisserver.Options{})
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true, ConnWriteTimeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	sub := rueidisdriver.Conn(c).(driver.Subscriber).Subscribe(t.Context())
	ctx := testCtx(t)
	require.NoError(t, sub.Subscribe(ctx, "hung"))
	require.NoError(t, sub.Ping(ctx, "ready"))
	p, err := sub.Receive(ctx)
	require.NoError(t, err)
	require.True(t, p.Pong)

	require.NoError(t, srv.Pause())
	t.Cleanup(func() { _ = srv.Resume() })
	received := make(chan error, 1)
	go func() {
		_, err := sub.Receive(t.Context())
		received <- err
	}()
	closed := make(chan error, 1)
	go func() { closed <- sub.Close() }()
	select {
	case err := <-received:
		assert.Error(t, err)
	case <-ctx.Done():
		t.Fatal("Close did not end the Receive that waits")
	}
	select {
	case err := <-closed:
		assert.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("Close did not return after ConnWriteTimeout")
	}
}
