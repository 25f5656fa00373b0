package netns

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/internal/harness/childproc/childproctest"
	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
)

// hung is how long a call to a partitioned server is given before it counts as hung.
const hung = 200 * time.Millisecond

// newHost creates a namespace for the test and closes it when the test ends, after the
// servers the test starts in it later (cleanups run last first).
func newHost(t testing.TB) *Host {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	h, err := New(ctx)
	switch {
	case errors.Is(err, ErrNoIptables):
		childproctest.Missing(t, err, "apt-get install -y iptables")
	case errors.Is(err, ErrNotRoot) && os.Getenv("CI") == "true":
		t.Fatalf("%v; CI must run this package's tests as root", err)
	case errors.Is(err, ErrNotRoot):
		t.Skipf("%v; run this package's tests as root (outside CI only: CI=true fails)", err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, h.Close()) })
	return h
}

// startIn starts a redis-server in h's namespace. redisserver's readiness probe checks that
// the server's INFO process_id is the child's pid, so this also checks that Wrap execs.
func startIn(t *testing.T, h *Host) *redisserver.Server {
	t.Helper()
	// Protected mode refuses clients from outside the loopback, as the host is.
	return redistest.Start(t, redisserver.Options{Host: h.Addr(), Wrap: h.Wrap(), Args: []string{"--protected-mode", "no"}})
}

// client returns a client that applies the caller's context deadline to socket reads and
// writes and never retries, so that a hung server fails a call at the caller's deadline.
func client(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func pingWithin(c *redis.Client, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return c.Ping(ctx).Err()
}

func isTimeout(err error) bool {
	var nerr net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &nerr) && nerr.Timeout()
}

func TestPartitionHeal(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	s := startIn(t, h)
	c := client(t, s.Addr())
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, pingWithin(c, 5*time.Second))

	require.NoError(t, h.Partition(ctx))
	require.NoError(t, h.Partition(ctx), "a second Partition")
	err := pingWithin(c, hung)
	require.Error(t, err)
	assert.True(t, isTimeout(err), "a PING hangs until its deadline, it is not refused: %v", err)
	d := net.Dialer{Timeout: hung}
	_, err = d.DialContext(ctx, "tcp", s.Addr())
	require.Error(t, err)
	assert.True(t, isTimeout(err), "a connect hangs until its deadline: %v", err)

	require.NoError(t, h.Heal(ctx))
	require.NoError(t, h.Heal(ctx), "a second Heal")
	require.NoError(t, pingWithin(c, 5*time.Second))
}

// A partition isolates one namespace: the chaos suite partitions some masters of five.
func TestPartitionIsPerHost(t *testing.T) {
	t.Parallel()
	a, b := newHost(t), newHost(t)
	require.NotEqual(t, a.Addr(), b.Addr())
	ca, cb := client(t, startIn(t, a).Addr()), client(t, startIn(t, b).Addr())
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	require.NoError(t, a.Partition(ctx))
	assert.True(t, isTimeout(pingWithin(ca, hung)), "a is partitioned")
	assert.NoError(t, pingWithin(cb, 5*time.Second), "b is not")
}

// A TCP connection survives a partition, and a command sent during it is delivered, and
// executed, after Heal: the kernel retransmits it.
func TestConnectionOutlivesPartition(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	s := startIn(t, h)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", s.Addr())
	require.NoError(t, err)
	defer conn.Close()
	r := bufio.NewReader(conn)
	require.NoError(t, conn.SetDeadline(time.Now().Add(5*time.Second)))
	_, err = conn.Write([]byte("INCR k\r\n"))
	require.NoError(t, err)
	require.Equal(t, ":1\r\n", readLine(t, r))

	require.NoError(t, h.Partition(ctx))
	_, err = conn.Write([]byte("INCR k\r\n"))
	require.NoError(t, err, "the write only fills the socket buffer")
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(hung)))
	_, err = r.ReadString('\n')
	require.True(t, isTimeout(err), "no reply through the partition: %v", err)

	require.NoError(t, h.Heal(ctx))
	healed := time.Now()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
	assert.Equal(t, ":2\r\n", readLine(t, r), "the INCR sent during the partition ran after Heal")
	t.Logf("reply %v after Heal", time.Since(healed).Round(time.Millisecond))
}

func readLine(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	return line
}

func TestClose(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	list := func() string {
		out, err := exec.Command("ip", "netns", "list").CombinedOutput()
		require.NoError(t, err, "%s", out)
		return string(out)
	}
	require.Contains(t, list(), h.name)
	_, err := net.InterfaceByName(h.name)
	require.NoError(t, err, "the host end of the veth")

	require.NoError(t, h.Close())
	assert.NotContains(t, strings.Fields(list()), h.name)
	_, err = net.InterfaceByName(h.name)
	assert.Error(t, err, "no veth left on the host")
	assert.NoError(t, h.Close(), "a second Close")
	assert.Error(t, h.Partition(t.Context()), "Partition after Close")
}

// New closes what it created when a step fails; here the namespace exists but has no veth.
func TestCloseAfterPartialNew(t *testing.T) {
	t.Parallel()
	newHost(t) // for its root and iptables checks
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	h, err := create(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, h.Close()) })
	require.FileExists(t, "/run/netns/"+h.name)
	require.NoError(t, h.Close())
	assert.NoFileExists(t, "/run/netns/"+h.name)
}

func TestNewCancelled(t *testing.T) {
	t.Parallel()
	newHost(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	h, err := New(ctx)
	require.ErrorIs(t, err, context.Canceled)
	assert.Nil(t, h)
}

func TestMissingIptables(t *testing.T) {
	childproctest.CheckMissing(t, "apt-get install -y iptables", map[string]func(testing.TB){
		"New": func(t testing.TB) { newHost(t) },
	})
}

func TestSubnetIndex(t *testing.T) {
	for _, idx := range []int{0, 1, 63, 64, numSubnets - 1} {
		hostEnd, nsEnd, err := freeSubnetFrom(idx, nil)
		require.NoError(t, err)
		assert.Equal(t, idx, subnetIndex(hostEnd), "host end %v", hostEnd)
		assert.Equal(t, idx, subnetIndex(nsEnd), "namespace end %v", nsEnd)
		assert.Equal(t, hostEnd.Next(), nsEnd)
		assert.True(t, subnets.Contains(nsEnd), "%v", nsEnd)
	}
}

func TestFreeSubnetSkipsUsed(t *testing.T) {
	hostEnd, _, err := freeSubnetFrom(5, map[int]bool{5: true, 6: true})
	require.NoError(t, err)
	assert.Equal(t, "10.200.0.29", hostEnd.String())
	hostEnd, _, err = freeSubnetFrom(numSubnets-1, map[int]bool{numSubnets - 1: true})
	require.NoError(t, err)
	assert.Equal(t, "10.200.0.1", hostEnd.String(), "wraps around")
	all := make(map[int]bool)
	for i := range numSubnets {
		all[i] = true
	}
	_, _, err = freeSubnetFrom(0, all)
	assert.Error(t, err)
}
