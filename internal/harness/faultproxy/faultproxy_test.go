package faultproxy_test

import (
	"bufio"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/internal/harness/faultproxy"
	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
)

// newProxy starts a redis-server and a proxy in front of it, both closed when the test ends.
func newProxy(t *testing.T) (*faultproxy.Proxy, *redisserver.Server) {
	t.Helper()
	s := redistest.Start(t, redisserver.Options{})
	p, err := faultproxy.New(s.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, p.Close()) })
	return p, s
}

// conn is a raw RESP connection, for tests that need exact control of timing.
type conn struct {
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return &conn{Conn: c, r: bufio.NewReader(c)}
}

func (c *conn) send(t *testing.T, cmd string) {
	t.Helper()
	_, err := c.Write([]byte(cmd))
	require.NoError(t, err)
}

// read reads one reply line, waiting at most timeout.
func (c *conn) read(timeout time.Duration) (string, error) {
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	return c.r.ReadString('\n')
}

// rtt measures one PING.
func (c *conn) rtt(t *testing.T) time.Duration {
	t.Helper()
	start := time.Now()
	c.send(t, "PING\r\n")
	line, err := c.read(2 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "+PONG\r\n", line)
	return time.Since(start)
}

func requireTimeout(t *testing.T, err error) {
	t.Helper()
	var nerr net.Error
	require.ErrorAs(t, err, &nerr)
	require.True(t, nerr.Timeout(), "%v", err)
}

func TestPassThrough(t *testing.T) {
	t.Parallel()
	p, _ := newProxy(t)
	c := redistest.Client(t, p.Addr())
	ctx := t.Context()
	key := t.Name()

	require.NoError(t, c.Ping(ctx).Err())
	require.NoError(t, c.Set(ctx, key, "v", time.Minute).Err())
	got, err := c.Get(ctx, key).Result()
	require.NoError(t, err)
	assert.Equal(t, "v", got)
	assert.Equal(t, 1, p.Conns())

	// A value larger than one read buffer arrives whole.
	big := string(make([]byte, 1<<20))
	require.NoError(t, c.Set(ctx, key, big, time.Minute).Err())
	got, err = c.Get(ctx, key).Result()
	require.NoError(t, err)
	assert.Equal(t, big, got)
}

func TestSetDelay(t *testing.T) {
	t.Parallel()
	const delay = 100 * time.Millisecond
	p, _ := newProxy(t)
	c := dial(t, p.Addr())
	require.Less(t, c.rtt(t), delay/2)

	p.SetDelay(delay)
	assert.GreaterOrEqual(t, c.rtt(t), delay, "existing connection")
	assert.GreaterOrEqual(t, dial(t, p.Addr()).rtt(t), delay, "new connection")

	// Five PINGs sent 20 ms apart come back about delay after the last one, not five delays
	// later: the delay does not serialise the connection.
	start := time.Now()
	for range 5 {
		c.send(t, "PING\r\n")
		time.Sleep(20 * time.Millisecond)
	}
	for range 5 {
		line, err := c.read(2 * time.Second)
		require.NoError(t, err)
		require.Equal(t, "+PONG\r\n", line)
	}
	assert.Less(t, time.Since(start), 4*delay)

	p.SetDelay(0)
	assert.Less(t, c.rtt(t), delay/2)
}

func TestSetDelayLoweredReleasesWaitingData(t *testing.T) {
	t.Parallel()
	p, _ := newProxy(t)
	c := dial(t, p.Addr())
	p.SetDelay(time.Hour)
	start := time.Now()
	c.send(t, "PING\r\n")
	time.Sleep(50 * time.Millisecond)
	p.SetDelay(0)
	line, err := c.read(2 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, "+PONG\r\n", line)
	assert.Less(t, time.Since(start), time.Second)
}

func TestHangAndHeal(t *testing.T) {
	t.Parallel()
	p, _ := newProxy(t)
	c := dial(t, p.Addr())
	c.rtt(t)

	p.Hang()
	c.send(t, "PING\r\n")
	c.send(t, "ECHO held\r\n")
	_, err := c.read(200 * time.Millisecond)
	requireTimeout(t, err)

	// New connections are accepted while hung, but get no replies either.
	c2 := dial(t, p.Addr())
	c2.send(t, "PING\r\n")
	_, err = c2.read(200 * time.Millisecond)
	requireTimeout(t, err)
	assert.Equal(t, 2, p.Conns())

	require.NoError(t, p.Heal())
	for _, want := range []string{"+PONG\r\n", "$4\r\n", "held\r\n"} {
		line, err := c.read(time.Second)
		require.NoError(t, err)
		assert.Equal(t, want, line, "held commands are delivered in order")
	}
	line, err := c2.read(time.Second)
	require.NoError(t, err)
	assert.Equal(t, "+PONG\r\n", line)
}

func TestHangHoldsReplies(t *testing.T) {
	t.Parallel()
	p, s := newProxy(t)
	sub := dial(t, p.Addr())
	sub.send(t, "SUBSCRIBE "+t.Name()+"\r\n")
	for range 6 { // *3, $9, subscribe, $len, channel, :1
		_, err := sub.read(time.Second)
		require.NoError(t, err)
	}

	p.Hang()
	require.NoError(t, redistest.Client(t, s.Addr()).Publish(t.Context(), t.Name(), "m").Err())
	_, err := sub.read(200 * time.Millisecond)
	requireTimeout(t, err)

	require.NoError(t, p.Heal())
	line, err := sub.read(time.Second)
	require.NoError(t, err)
	assert.Equal(t, "*3\r\n", line, "the held message arrives")
}

func TestRefuseAndHeal(t *testing.T) {
	t.Parallel()
	p, _ := newProxy(t)
	addr := p.Addr()
	c := dial(t, addr)
	c.rtt(t)

	p.Refuse()
	_, err := net.Dial("tcp", addr)
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
	_, err = c.read(time.Second)
	assert.Error(t, err, "existing connections are closed")
	assert.Equal(t, 0, p.Conns())

	require.NoError(t, p.Heal())
	assert.Equal(t, addr, p.Addr())
	dial(t, addr).rtt(t)
	require.NoError(t, p.Heal(), "Heal when healthy")
}

func TestReset(t *testing.T) {
	t.Parallel()
	p, _ := newProxy(t)
	c := dial(t, p.Addr())
	c.rtt(t)

	p.Reset()
	_, err := c.read(time.Second)
	assert.ErrorIs(t, err, syscall.ECONNRESET)
	assert.Equal(t, 0, p.Conns())

	dial(t, p.Addr()).rtt(t)
	assert.Equal(t, 1, p.Conns())
}

func TestUpstreamDown(t *testing.T) {
	t.Parallel()
	p, s := newProxy(t)
	require.NoError(t, s.Kill())
	c := dial(t, p.Addr())
	_, err := c.read(time.Second)
	assert.Error(t, err, "the client's connection closes when upstream cannot be dialled")
	assert.Eventually(t, func() bool { return p.Conns() == 0 }, time.Second, 10*time.Millisecond)
}

// TestCloseLeavesNoGoroutines runs alone (not parallel), so that the goroutine count is ours.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	s := redistest.Start(t, redisserver.Options{})
	before := runtime.NumGoroutine()

	p, err := faultproxy.New(s.Addr())
	require.NoError(t, err)
	idle := dial(t, p.Addr())
	idle.rtt(t)
	p.SetDelay(time.Hour)
	delayed := dial(t, p.Addr())
	delayed.send(t, "PING\r\n")
	p.Hang()
	hung := dial(t, p.Addr())
	hung.send(t, "PING\r\n")
	require.Eventually(t, func() bool { return p.Conns() == 3 }, time.Second, 5*time.Millisecond)

	require.Greater(t, runtime.NumGoroutine(), before, "the proxy is running")

	require.NoError(t, p.Close())
	require.NoError(t, p.Close(), "Close twice")
	assert.Equal(t, 0, p.Conns())
	assert.Error(t, p.Heal(), "Heal after Close")
	// Polled here rather than with assert.Eventually, which runs its condition on a goroutine
	// of its own. Close has waited for the proxy's goroutines; they may still be returning.
	deadline := time.Now().Add(time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines, %d before New:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

// BenchmarkPing compares a PING round trip made directly with one made through the proxy, to
// keep the pass-through path cheap.
func BenchmarkPing(b *testing.B) {
	s := redistest.Start(b, redisserver.Options{})
	p, err := faultproxy.New(s.Addr())
	require.NoError(b, err)
	b.Cleanup(func() { _ = p.Close() })
	for _, bb := range []struct{ name, addr string }{{"direct", s.Addr()}, {"proxy", p.Addr()}} {
		b.Run(bb.name, func(b *testing.B) {
			c, err := net.Dial("tcp", bb.addr)
			require.NoError(b, err)
			defer c.Close()
			r := bufio.NewReader(c)
			ping := []byte("PING\r\n")
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Write(ping); err != nil {
					b.Fatal(err)
				}
				if _, err := r.ReadSlice('\n'); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
