package redlock

// Integration tests on real redis-server processes that the test starts on
// loopback ports and stops by pid. Under CI=true a missing redis-server
// fails these tests; elsewhere they skip.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/internal/harness/faultproxy"
	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
	"quorumlock.dev/quorum"

	"quorumlock.dev/driver/goredis"
)

// patientClient has go-redis timeouts far longer than the lock's node
// timeout: whatever bounds an attempt must be the lock's own code.
func patientClient(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr: addr, MaxRetries: -1, DialerRetries: 1,
		DialTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func realMasters(t *testing.T, n int) ([]*redisserver.Server, []Master, []*redis.Client) {
	t.Helper()
	servers := redistest.StartN(t, n, redisserver.Options{})
	masters := make([]Master, n)
	clients := make([]*redis.Client, n)
	for i, s := range servers {
		clients[i] = patientClient(t, s.Addr())
		masters[i] = goredis.Conn(clients[i])
	}
	return servers, masters, clients
}

// lockValue reads the lock key on a master through a fresh, short-lived
// client, so a paused server cannot hold up the test.
func lockValue(t *testing.T, addr, resource string) string {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: 2 * time.Second})
	defer c.Close()
	v, err := c.Get(context.Background(), "lock:"+resource).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	require.NoError(t, err)
	return v
}

// TestHungMasterCostsTheNodeTimeout: one of five masters stopped with
// SIGSTOP. The lock is granted by the other four, without waiting for the
// hung one beyond the node timeout, although go-redis would wait 10 s.
func TestHungMasterCostsTheNodeTimeout(t *testing.T) {
	servers, masters, _ := realMasters(t, 5)
	c := newTestClient(t, masters) // default node timeout, 50 ms
	res := resourceName(t)
	require.NoError(t, servers[4].Pause())
	t.Cleanup(func() { _ = servers[4].Resume() })

	start := time.Now()
	l, err := c.TryLock(context.Background(), res, 10*time.Second)
	elapsed := time.Since(start)
	require.NoError(t, err)
	assert.Less(t, elapsed, 2*time.Second, "the attempt waited for the hung master's go-redis timeout")
	for _, s := range servers[:4] {
		// TryLock returned at three; the fourth may still be setting its key.
		assert.Eventually(t, func() bool { return lockValue(t, s.Addr(), res) == l.Token() }, 2*time.Second, time.Millisecond)
	}

	require.NoError(t, l.Unlock(context.Background()))
	// The hung master applies the SET when it resumes (a ghost write); the
	// release, held back until that SET returned, follows it.
	require.NoError(t, servers[4].Resume())
	assert.Eventually(t, func() bool { return lockValue(t, servers[4].Addr(), res) == "" }, 5*time.Second, 10*time.Millisecond,
		"the resumed master keeps our key")
}

// TestThreeHungMastersOneAttempt: three of five stopped: one attempt ends
// with ErrQuorumUnavailable after about the node timeout, not seconds.
func TestThreeHungMastersOneAttempt(t *testing.T) {
	servers, masters, _ := realMasters(t, 5)
	c := newTestClient(t, masters)
	res := resourceName(t)
	for _, s := range servers[:3] {
		require.NoError(t, s.Pause())
		t.Cleanup(func() { _ = s.Resume() })
	}
	start := time.Now()
	l, err := c.TryLock(context.Background(), res, 10*time.Second)
	elapsed := time.Since(start)
	assert.Nil(t, l)
	require.ErrorIs(t, err, ErrQuorumUnavailable)
	assert.ErrorIs(t, err, quorum.ErrTimeout)
	assert.Less(t, elapsed, 2*time.Second)
	t.Logf("three hung masters: %v to ErrQuorumUnavailable", elapsed)
	for _, s := range servers[3:] {
		assert.Empty(t, lockValue(t, s.Addr(), res), "a responsive master keeps our key after a failed attempt")
	}
	for _, s := range servers[:3] {
		require.NoError(t, s.Resume())
	}
	for _, s := range servers[:3] {
		assert.Eventually(t, func() bool { return lockValue(t, s.Addr(), res) == "" }, 5*time.Second, 10*time.Millisecond,
			"a resumed master keeps our key")
	}
}

// TestThreeDeadMastersOneAttempt: three of five killed.
func TestThreeDeadMastersOneAttempt(t *testing.T) {
	servers, masters, _ := realMasters(t, 5)
	c := newTestClient(t, masters)
	for _, s := range servers[:3] {
		require.NoError(t, s.Kill())
	}
	start := time.Now()
	l, err := c.TryLock(context.Background(), resourceName(t), 10*time.Second)
	elapsed := time.Since(start)
	assert.Nil(t, l)
	require.ErrorIs(t, err, ErrQuorumUnavailable)
	var me *MasterError
	require.ErrorAs(t, err, &me)
	assert.Less(t, elapsed, 2*time.Second)
	t.Logf("three dead masters: %v to ErrQuorumUnavailable", elapsed)
}

// TestSlowMasterNotAwaited: one master behind a 2 s delay and a node
// timeout of 5 s: TryLock returns with the majority, long before either.
func TestSlowMasterNotAwaited(t *testing.T) {
	servers := redistest.StartN(t, 3, redisserver.Options{})
	proxy, err := faultproxy.New(servers[2].Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	masters := conns(patientClient(t, servers[0].Addr()), patientClient(t, servers[1].Addr()), patientClient(t, proxy.Addr()))
	// Open the slow connection first so the delay hits the SET itself.
	require.NoError(t, raw(masters[2]).Ping(context.Background()).Err())
	proxy.SetDelay(2 * time.Second)

	c := newTestClient(t, masters, WithNodeTimeout(5*time.Second))
	start := time.Now()
	l, err := c.TryLock(context.Background(), resourceName(t), 30*time.Second)
	elapsed := time.Since(start)
	require.NoError(t, err)
	assert.Less(t, elapsed, time.Second, "TryLock waited for the slow master")
	proxy.SetDelay(0)
	require.NoError(t, l.Unlock(context.Background()))
}

// TestTwoProcessesOneWriter is the testing matrix's first case: two OS
// processes compete for one resource on real Redis, and exactly one of them
// writes.
func TestTwoProcessesOneWriter(t *testing.T) {
	servers := redistest.StartN(t, 4, redisserver.Options{})
	storage := redistest.Client(t, servers[3].Addr())
	var addrs []string
	for _, s := range servers[:3] {
		addrs = append(addrs, s.Addr())
	}
	res := resourceName(t)
	startAt := time.Now().Add(500 * time.Millisecond)

	type outcome struct {
		code int
		out  string
	}
	results := make(chan outcome, 2)
	for range 2 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(),
			"QUORUMLOCK_COMPETE=1",
			"QUORUMLOCK_MASTERS="+strings.Join(addrs, ","),
			"QUORUMLOCK_STORAGE="+servers[3].Addr(),
			"QUORUMLOCK_RESOURCE="+res,
			"QUORUMLOCK_START_AT="+strconv.FormatInt(startAt.UnixNano(), 10),
		)
		go func() {
			out, err := cmd.CombinedOutput()
			code := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				code = exit.ExitCode()
			} else if err != nil {
				code = -1
			}
			results <- outcome{code, string(out)}
		}()
	}
	codes := map[int]int{}
	for range 2 {
		r := <-results
		codes[r.code]++
		t.Logf("competitor exited %d: %s", r.code, strings.TrimSpace(r.out))
	}
	assert.Equal(t, map[int]int{competeWrote: 1, competeLost: 1}, codes)
	writes, err := storage.LRange(context.Background(), "writes:"+res, 0, -1).Result()
	require.NoError(t, err)
	assert.Len(t, writes, 1, "exactly one process must write")
}

const (
	competeWrote = 0
	competeLost  = 3
)

// compete is the child process of TestTwoProcessesOneWriter: one attempt
// at the lock at an agreed moment; the winner writes and holds on a while,
// so that the other's attempt surely overlaps.
func compete() int {
	masters := []Master{}
	for _, addr := range strings.Split(os.Getenv("QUORUMLOCK_MASTERS"), ",") {
		masters = append(masters, goredis.Conn(redis.NewClient(&redis.Options{Addr: addr})))
	}
	storage := redis.NewClient(&redis.Options{Addr: os.Getenv("QUORUMLOCK_STORAGE")})
	res := os.Getenv("QUORUMLOCK_RESOURCE")
	at, _ := strconv.ParseInt(os.Getenv("QUORUMLOCK_START_AT"), 10, 64)
	c, err := New(masters)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	ctx := context.Background()
	// Warm the connections so both start from the same place.
	for _, m := range masters {
		_ = raw(m).Ping(ctx).Err()
	}
	time.Sleep(time.Until(time.Unix(0, at)))
	l, err := c.TryLock(ctx, res, 10*time.Second)
	switch {
	case errors.Is(err, ErrNotAcquired):
		fmt.Println("pid", os.Getpid(), "lost:", err)
		return competeLost
	case err != nil:
		fmt.Println("pid", os.Getpid(), err)
		return 1
	}
	if err := storage.RPush(ctx, "writes:"+res, os.Getpid()).Err(); err != nil {
		fmt.Println(err)
		return 1
	}
	time.Sleep(time.Second)
	if err := l.Unlock(ctx); err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println("pid", os.Getpid(), "wrote")
	return competeWrote
}

func TestMain(m *testing.M) {
	if os.Getenv("QUORUMLOCK_COMPETE") != "" {
		os.Exit(compete())
	}
	// go-redis logs every failed dial; the tests take masters down on purpose.
	redis.SetLogger(quiet{})
	os.Exit(m.Run())
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
