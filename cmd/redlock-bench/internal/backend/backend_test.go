package backend

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/cmd/redlock-bench/internal/report"
	"quorumlock.dev/internal/harness/faultproxy"
	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
)

// pingAddr sends PING on a fresh connection, so that a closed server fails at once instead
// of being redialled by a client library.
func pingAddr(addr string) error {
	c, err := connect(context.Background(), &redis.Options{Addr: addr}, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Ping(context.Background()).Err()
}

func rolesOf(servers []report.ServerInfo) map[string]int {
	roles := map[string]int{}
	for _, s := range servers {
		roles[s.Role]++
	}
	return roles
}

// requireDistinct fails unless masters, single and fence are all different addresses.
func requireDistinct(t *testing.T, e *Env) {
	t.Helper()
	all := append(append([]string(nil), e.Masters...), e.Single, e.Fence)
	seen := map[string]bool{}
	for _, a := range all {
		require.NotEmpty(t, a)
		require.False(t, seen[a], "address %s used twice in %v", a, all)
		seen[a] = true
	}
}

var prefixPattern = regexp.MustCompile(`^redlock-bench-[0-9a-f]{8}$`)

func TestOpenEmbedded(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e, err := Open(ctx, Config{Masters: 5})
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close(context.Background()) })

	assert.Equal(t, "embedded", e.Backend)
	assert.Regexp(t, prefixPattern, e.Prefix)
	require.Len(t, e.Masters, 5)
	requireDistinct(t, e)
	require.Len(t, e.Servers, 7)
	assert.Equal(t, map[string]int{"master": 5, "single": 1, "fence": 1}, rolesOf(e.Servers))
	for _, s := range e.Servers {
		assert.True(t, strings.HasPrefix(s.Version, "miniredis"), "version %q", s.Version)
		require.NoError(t, pingAddr(s.Addr), "%s %s", s.Role, s.Addr)
	}

	require.NoError(t, e.Close(ctx))
	for _, s := range e.Servers {
		assert.Error(t, pingAddr(s.Addr), "%s %s still answers after Close", s.Role, s.Addr)
	}
	assert.NoError(t, e.Close(ctx), "second Close")
}

func TestOpenEmbeddedPrefixesDiffer(t *testing.T) {
	t.Parallel()
	a, err := Open(t.Context(), Config{Masters: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	b, err := Open(t.Context(), Config{Kind: "embedded", Masters: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	assert.NotEqual(t, a.Prefix, b.Prefix)
}

func TestOpenRedisServer(t *testing.T) {
	t.Parallel()
	redistest.Need(t)
	ctx := t.Context()
	e, err := Open(ctx, Config{Kind: "redis-server", Masters: 3})
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close(context.Background()) })

	assert.Equal(t, "redis-server", e.Backend)
	assert.Regexp(t, prefixPattern, e.Prefix)
	require.Len(t, e.Masters, 3)
	requireDistinct(t, e)
	require.Len(t, e.Servers, 5)
	assert.Equal(t, map[string]int{"master": 3, "single": 1, "fence": 1}, rolesOf(e.Servers))
	for _, s := range e.Servers {
		assert.Regexp(t, `^[0-9]`, s.Version, "%s %s", s.Role, s.Addr)
		require.NoError(t, pingAddr(s.Addr), "%s %s", s.Role, s.Addr)
	}
	require.Len(t, e.servers, 5)
	var pids []int
	var dirs []string
	for _, s := range e.servers {
		pids = append(pids, s.Pid())
		dirs = append(dirs, s.Dir())
		assert.DirExists(t, s.Dir())
	}

	require.NoError(t, e.Close(ctx))
	for _, s := range e.Servers {
		assert.Error(t, pingAddr(s.Addr), "%s %s still answers after Close", s.Role, s.Addr)
	}
	for i, pid := range pids {
		_, err := os.Stat("/proc/" + strconv.Itoa(pid))
		assert.ErrorIs(t, err, os.ErrNotExist, "pid %d still exists", pid)
		assert.NoDirExists(t, dirs[i])
	}
	assert.NoError(t, e.Close(ctx), "second Close")
}

func TestAddrsCloseDeletesOnlyRunKeys(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	servers := redistest.StartN(t, 3, redisserver.Options{})
	masters := []string{servers[0].Addr(), servers[1].Addr()}
	fenceAddr := servers[2].Addr()

	e, err := Open(ctx, Config{Kind: "addrs", Masters: 2, Addrs: masters, FenceAddr: fenceAddr})
	require.NoError(t, err)
	assert.Equal(t, "addrs", e.Backend)
	assert.Equal(t, masters, e.Masters)
	assert.Equal(t, masters[0], e.Single, "the single server defaults to the first address")
	assert.Equal(t, fenceAddr, e.Fence)
	assert.Equal(t, map[string]int{"master": 2, "single": 1, "fence": 1}, rolesOf(e.Servers))
	for _, s := range e.Servers {
		assert.Regexp(t, `^[0-9]`, s.Version, "%s %s", s.Role, s.Addr)
	}

	ours := []string{"lock:" + e.Prefix + ":x", "fence:" + e.Prefix + ":y"}
	// Keys that only look alike must survive: another run's prefix, and our prefix
	// without the separator that ends it.
	theirs := []string{"other:z", "lock:redlock-bench-00000000:x", "lock:" + e.Prefix + "0:x", "x:lock:" + e.Prefix + ":x"}
	for _, s := range servers {
		c := redistest.Client(t, s.Addr())
		for _, k := range append(append([]string(nil), ours...), theirs...) {
			require.NoError(t, c.Set(ctx, k, "1", 0).Err())
		}
	}
	// Enough keys on one server for several SCAN pages and DEL batches.
	bulk := redistest.Client(t, masters[1])
	pipe := bulk.Pipeline()
	for i := range 2500 {
		pipe.Set(ctx, fmt.Sprintf("lock:%s:%d", e.Prefix, i), "1", 0)
	}
	_, err = pipe.Exec(ctx)
	require.NoError(t, err)

	require.NoError(t, e.Close(ctx))
	for _, s := range servers {
		c := redistest.Client(t, s.Addr())
		for _, k := range ours {
			assert.Zero(t, c.Exists(ctx, k).Val(), "%s on %s not deleted", k, s.Addr())
		}
		for _, k := range theirs {
			assert.Equal(t, int64(1), c.Exists(ctx, k).Val(), "%s on %s deleted", k, s.Addr())
		}
		assert.Equal(t, int64(len(theirs)), c.DBSize(ctx).Val(), "keys left on %s", s.Addr())
	}
	assert.NoError(t, e.Close(ctx), "second Close")
}

func TestAddrsUnreachable(t *testing.T) {
	t.Parallel()
	// The live servers need to answer PING only, which miniredis does.
	live := []string{miniredis.RunT(t).Addr(), miniredis.RunT(t).Addr()}
	dead, err := FreeAddr()
	require.NoError(t, err)

	tests := []struct {
		name string
		bc   Config
		role string
	}{
		{"master", Config{Masters: 2, Addrs: []string{live[0], dead}}, "master"},
		{"single", Config{Masters: 2, Addrs: live, SingleAddr: dead}, "single"},
		{"fence", Config{Masters: 2, Addrs: live, FenceAddr: dead}, "fence"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.bc.Kind = "addrs"
			start := time.Now()
			e, err := Open(t.Context(), tt.bc)
			require.Error(t, err)
			assert.Nil(t, e)
			assert.Less(t, time.Since(start), checkTimeout, "a refused connection must fail at once")
			assert.ErrorIs(t, err, ErrUnreachable)
			assert.ErrorIs(t, err, syscall.ECONNREFUSED)
			msg := err.Error()
			assert.NotContains(t, msg, "\n")
			assert.True(t, strings.HasPrefix(msg, "backend: cannot reach "+tt.role+" "+dead+": "), msg)
		})
	}

	t.Run("several", func(t *testing.T) {
		dead2, err := FreeAddr()
		require.NoError(t, err)
		_, err = Open(t.Context(), Config{Kind: "addrs", Masters: 3, Addrs: []string{live[0], dead, dead2}})
		require.ErrorIs(t, err, ErrUnreachable)
		msg := err.Error()
		assert.NotContains(t, msg, "\n")
		assert.True(t, strings.HasPrefix(msg, "backend: cannot reach master "+dead+": "), msg)
		assert.Contains(t, msg, "1 more unreachable")
	})
}

func TestAddrsHungServer(t *testing.T) {
	t.Parallel()
	// A server that accepts connections and never answers, as a stopped process does.
	proxy, err := faultproxy.New(miniredis.RunT(t).Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	proxy.Hang()
	hung := proxy.Addr()

	start := time.Now()
	_, err = Open(t.Context(), Config{Kind: "addrs", Masters: 1, Addrs: []string{hung}})
	assert.Less(t, time.Since(start), checkTimeout+time.Second)
	require.ErrorIs(t, err, ErrUnreachable)
	assert.True(t, strings.HasPrefix(err.Error(), "backend: cannot reach master "+hung+": "), err.Error())
	assert.NotContains(t, err.Error(), "\n")
}

func TestAddrsServerAnswersWithError(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	m.RequireAuth("secret")
	_, err := Open(t.Context(), Config{Kind: "addrs", Masters: 1, Addrs: []string{m.Addr()}})
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrUnreachable, "the server answered")
	assert.Contains(t, err.Error(), "master "+m.Addr())
	assert.Contains(t, err.Error(), "NOAUTH")
}

func TestAddrsMiniredisVersionUnknown(t *testing.T) {
	t.Parallel()
	// miniredis does not support INFO server: a server like it is usable, of unknown version.
	addr := miniredis.RunT(t).Addr()
	e, err := Open(t.Context(), Config{Kind: "addrs", Masters: 1, Addrs: []string{addr}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	assert.Equal(t, []report.ServerInfo{{Role: "master", Addr: addr, Version: "unknown"}, {Role: "single", Addr: addr, Version: "unknown"}}, e.Servers)
	assert.Empty(t, e.Fence)
}

func TestOpenRejectsBadConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		bc   Config
	}{
		{"unknown kind", Config{Kind: "cluster", Masters: 1}},
		{"zero masters", Config{Masters: 0}},
		{"negative masters", Config{Masters: -1}},
		{"too many masters", Config{Masters: 17}},
		{"zero masters addrs", Config{Kind: "addrs", Masters: 0, Addrs: []string{"127.0.0.1:1"}}},
		{"too few addrs", Config{Kind: "addrs", Masters: 3, Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}}},
		{"no addrs", Config{Kind: "addrs", Masters: 1}},
		{"master twice", Config{Kind: "addrs", Masters: 2, Addrs: []string{"127.0.0.1:1", "127.0.0.1:1"}}},
		{"no port", Config{Kind: "addrs", Masters: 1, Addrs: []string{"127.0.0.1"}}},
		{"bad fence address", Config{Kind: "addrs", Masters: 1, Addrs: []string{"127.0.0.1:1"}, FenceAddr: "nohost"}},
		{"addrs with embedded", Config{Masters: 1, Addrs: []string{"127.0.0.1:1"}}},
		{"fence addr with redis-server", Config{Kind: "redis-server", Masters: 1, FenceAddr: "127.0.0.1:1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := Open(t.Context(), tt.bc)
			assert.Nil(t, e)
			assert.ErrorIs(t, err, ErrConfig)
			assert.NotErrorIs(t, err, ErrUnreachable)
		})
	}
}

// Not parallel: a parallel test of this package that started a server on
// the port just freed made the dial below succeed (seen in CI). Tests that
// are not parallel run alone.
func TestFreeAddr(t *testing.T) {
	addr, err := FreeAddr()
	require.NoError(t, err)
	host, _, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1", host)
	// Nothing listens there.
	_, err = net.DialTimeout("tcp", addr, time.Second)
	assert.True(t, errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET), "dial %s: %v", addr, err)
}
