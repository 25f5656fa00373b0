package redisserver_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
)

// ping sends PING on a new connection and waits for the reply at most timeout.
func ping(addr string, timeout time.Duration) error {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	return pingOn(conn, bufio.NewReader(conn))
}

func pingOn(conn net.Conn, r *bufio.Reader) error {
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	return expectPong(r)
}

func expectPong(r *bufio.Reader) error {
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("got %q", line)
	}
	return nil
}

func procExists(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err == nil
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redisserver.Options{})
	ctx := t.Context()

	assert.Equal(t, "127.0.0.1:"+strconv.Itoa(s.Port()), s.Addr())
	pid := s.Pid()
	require.True(t, procExists(pid), "process %d", pid)
	require.NoError(t, ping(s.Addr(), time.Second))
	require.FileExists(t, s.Dir()+"/redis.log")

	// A command sent while paused times out, and is answered after Resume.
	require.NoError(t, s.Pause())
	conn, err := net.Dial("tcp", s.Addr())
	require.NoError(t, err, "the kernel accepts connections to a paused server")
	defer conn.Close()
	r := bufio.NewReader(conn)
	require.NoError(t, conn.SetDeadline(time.Now().Add(200*time.Millisecond)))
	err = pingOn(conn, r)
	var nerr net.Error
	require.ErrorAs(t, err, &nerr)
	require.True(t, nerr.Timeout(), "%v", err)
	require.NoError(t, s.Resume())
	require.NoError(t, conn.SetDeadline(time.Now().Add(time.Second)))
	require.NoError(t, expectPong(r))

	require.NoError(t, s.Kill())
	assert.False(t, procExists(pid), "process %d is reaped", pid)
	assert.Error(t, ping(s.Addr(), 200*time.Millisecond))
	require.NoError(t, s.Kill(), "Kill on a dead server")
	require.Error(t, s.Pause(), "Pause on a dead server")

	require.NoError(t, s.Restart(ctx))
	assert.NotEqual(t, pid, s.Pid())
	assert.Equal(t, "127.0.0.1:"+strconv.Itoa(s.Port()), s.Addr())
	require.NoError(t, ping(s.Addr(), time.Second))
	require.Error(t, s.Restart(ctx), "Restart while running")

	pid = s.Pid()
	require.NoError(t, s.Stop())
	require.NoError(t, s.Stop())
	assert.False(t, procExists(pid))
	assert.NoDirExists(t, s.Dir())

	// Restart after Stop recreates the temporary dir; the test's cleanup removes it again.
	require.NoError(t, s.Restart(ctx))
	require.NoError(t, ping(s.Addr(), time.Second))
}

func TestStopResumesPausedServer(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redisserver.Options{})
	pid := s.Pid()
	require.NoError(t, s.Pause())
	start := time.Now()
	require.NoError(t, s.Stop())
	assert.Less(t, time.Since(start), time.Second, "SIGTERM, not the SIGKILL fallback, ended it")
	assert.False(t, procExists(pid))
}

func TestPersistenceAcrossKill(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := redistest.Start(t, redisserver.Options{
		Dir:  dir,
		Args: []string{"--appendonly", "yes", "--appendfsync", "always"},
	})
	ctx := t.Context()
	key := t.Name()
	require.NoError(t, redistest.Client(t, s.Addr()).Set(ctx, key, "v", 0).Err())

	require.NoError(t, s.Kill())
	require.NoError(t, s.Restart(ctx))
	got, err := redistest.Client(t, s.Addr()).Get(ctx, key).Result()
	require.NoError(t, err)
	assert.Equal(t, "v", got, "Restart kept --appendonly yes and the dir")

	// The cleanup's Stop runs after this Kill; a dir the caller chose is kept.
	require.NoError(t, s.Kill())
	t.Cleanup(func() { assert.DirExists(t, dir) })
}

func TestVersion(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redisserver.Options{})
	got, err := s.Version(t.Context())
	require.NoError(t, err)

	// The server must report the version of the binary on PATH.
	out, err := exec.Command("redis-server", "--version").Output()
	require.NoError(t, err)
	m := regexp.MustCompile(`v=(\d+\.\d+\.\d+)`).FindSubmatch(out)
	require.NotNil(t, m, "%s", out)
	assert.Equal(t, string(m[1]), got)
}

func TestVersionHonoursContext(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redisserver.Options{})
	require.NoError(t, s.Pause())
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := s.Version(ctx)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), time.Second)
}

func TestStartFailures(t *testing.T) {
	t.Parallel()
	// Also applies redistest's rule for a missing redis-server to the cases below.
	other := redistest.Start(t, redisserver.Options{})
	ctx := t.Context()

	tests := []struct {
		name string
		opt  redisserver.Options
		want string // in the error, from the server's log
	}{
		{"port taken", redisserver.Options{Args: []string{"--port", strconv.Itoa(other.Port())}}, "Address already in use"},
		{"bad directive", redisserver.Options{Args: []string{"--no-such-directive", "x"}}, "FATAL CONFIG FILE ERROR"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := redisserver.Start(ctx, tt.opt)
			require.Error(t, err)
			assert.Nil(t, s)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	require.NoError(t, ping(other.Addr(), time.Second), "the other server is unharmed")
}

func TestBinary(t *testing.T) {
	t.Run("not on PATH", func(t *testing.T) {
		t.Setenv("PATH", t.TempDir())
		_, err := redisserver.Start(t.Context(), redisserver.Options{})
		assert.ErrorIs(t, err, redisserver.ErrNotInstalled)
	})
	t.Run("explicit path missing", func(t *testing.T) {
		_, err := redisserver.Start(t.Context(), redisserver.Options{Binary: "/nonexistent/redis-server"})
		require.Error(t, err)
		assert.NotErrorIs(t, err, redisserver.ErrNotInstalled, "a configured binary that is missing is a failure, not a skip")
		assert.ErrorIs(t, err, syscall.ENOENT)
	})
}
