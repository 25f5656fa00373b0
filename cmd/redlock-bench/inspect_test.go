package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/driver"
	"quorumlock.dev/driver/goredis"
	"quorumlock.dev/fence"
	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
	"quorumlock.dev/leadership"
	"quorumlock.dev/redlock"
)

// TestInspectAndReleaseCommands: inspect shows the holder on every master
// (exit 0), release by its token frees it (exit 0, released on 3 of 3);
// then inspect finds no holder and release nothing to free (exit 3); bad
// flags exit 2.
func TestInspectAndReleaseCommands(t *testing.T) {
	t.Parallel()
	servers := redistest.StartN(t, 3, redisserver.Options{})
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	conns := make([]*redis.Client, len(servers))
	for i, s := range servers {
		conns[i] = redistest.Client(t, s.Addr())
	}
	client, err := redlock.New(goredis.Masters(conns...))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	l, err := client.TryLock(context.Background(), "job:1", time.Minute)
	require.NoError(t, err)
	list := strings.Join(addrs, ",")
	// TryLock returns at a majority: the last SET may land later.
	require.Eventually(t, func() bool {
		for _, c := range conns {
			if v, _ := c.Get(context.Background(), "lock:job:1").Result(); v != l.Token() {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "the lock's key is not on every master")

	code, out, errOut := runCmd(t, "inspect", "-addrs", list, "-resource", "job:1", "-o", "json")
	require.Equal(t, exitOK, code, errOut)
	var in struct {
		Resource, Holder string
		Masters          []struct {
			Addr, Token string
			TTLms       int64 `json:"ttl_ms"`
		}
	}
	require.NoError(t, json.Unmarshal([]byte(out), &in), out)
	assert.Equal(t, l.Token(), in.Holder)
	require.Len(t, in.Masters, 3)
	for _, m := range in.Masters {
		assert.Equal(t, l.Token(), m.Token)
		assert.Greater(t, m.TTLms, int64(50_000))
	}
	code, out, _ = runCmd(t, "inspect", "-addrs", list, "-resource", "job:1")
	assert.Equal(t, exitOK, code)
	assert.Contains(t, out, "holder: "+l.Token())
	assert.NotContains(t, out, "fence:", "a fence without -fence-addr")

	counterSrv := redistest.Start(t, redisserver.Options{})
	counter, err := fence.NewRedisCounter(goredis.Conn(redistest.Client(t, counterSrv.Addr())))
	require.NoError(t, err)
	f, err := counter.Mint(context.Background(), "job:1")
	require.NoError(t, err)
	code, out, errOut = runCmd(t, "inspect", "-addrs", list, "-fence-addr", counterSrv.Addr(), "-resource", "job:1")
	assert.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, fmt.Sprintf("fence: %d (the last minted)", f))

	code, out, errOut = runCmd(t, "release", "-addrs", list, "-resource", "job:1", "-token", "someone-else")
	assert.Equal(t, exitNotHeld, code, errOut)
	assert.Contains(t, out, "released on 0 of 3 masters")
	code, out, errOut = runCmd(t, "release", "-addrs", list, "-resource", "job:1", "-token", l.Token())
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "released on 3 of 3 masters")
	for _, c := range conns {
		assert.Equal(t, redis.Nil, c.Get(context.Background(), "lock:job:1").Err(), "the key is still there")
	}
	code, out, _ = runCmd(t, "inspect", "-addrs", list, "-resource", "job:1")
	assert.Equal(t, exitNotHeld, code)
	assert.Contains(t, out, "holder: -")

	// Keys split between three attempts whose owners are gone: -force.
	for i, c := range conns {
		require.NoError(t, c.Set(context.Background(), "lock:job:2", fmt.Sprintf("gone-%d", i), time.Minute).Err())
	}
	code, out, errOut = runCmd(t, "release", "-addrs", list, "-resource", "job:2", "-force")
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "seen:")
	assert.Contains(t, out, "gone-2")
	assert.Contains(t, out, "released on 3 of 3 masters")
	for _, c := range conns {
		assert.Equal(t, redis.Nil, c.Get(context.Background(), "lock:job:2").Err(), "a split key is still there")
	}
	held, err := client.TryLock(context.Background(), "job:3", time.Minute)
	require.NoError(t, err)
	code, _, errOut = runCmd(t, "release", "-addrs", list, "-resource", "job:3", "-force")
	assert.Equal(t, exitError, code, "-force released a lock a token holds on a majority")
	assert.Contains(t, errOut, held.Token())
	in3, err := client.Inspect(context.Background(), "job:3")
	require.NoError(t, err)
	assert.Equal(t, held.Token(), in3.Holder)

	for _, args := range [][]string{
		{"inspect", "-addrs", list},
		{"inspect", "-resource", "job:1"},
		{"inspect", "-addrs", list, "-resource", "a\nb"},
		{"release", "-addrs", list, "-resource", "job:1"},
		{"release", "-addrs", list, "-resource", "job:1", "-token", "q"},
		{"release", "-addrs", list, "-resource", "job:1", "-token", "t", "-force"},
		{"inspect", "-addrs", list, "-resource", "job:1", "-o", "csv"},
	} {
		code, _, errOut := runCmd(t, args...)
		assert.Equal(t, exitUsage, code, "%q: %s", args, errOut)
	}
}

// TestInspectRoleCommand: inspect -role on real servers shows who leads,
// the term's fence (the counter's last with -fence-addr) and each master's
// time left (exit 0); after Resign nobody leads (exit 3); a majority of
// masters that do not answer exits 1; bad flags exit 2.
func TestInspectRoleCommand(t *testing.T) {
	t.Parallel()
	servers := redistest.StartN(t, 4, redisserver.Options{})
	addrs := make([]string, 3)
	masters := make([]driver.Conn, 3)
	for i, s := range servers[:3] {
		addrs[i] = s.Addr()
		masters[i] = goredis.Conn(redistest.Client(t, s.Addr()))
	}
	counterAddr := servers[3].Addr()
	counter, err := fence.NewRedisCounter(goredis.Conn(redistest.Client(t, counterAddr)))
	require.NoError(t, err)
	client, err := redlock.New(masters, redlock.WithFence(counter), redlock.WithNodeTimeout(500*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	e, err := leadership.New(client, "relay", leadership.WithIdentity("relay-host:42"), leadership.WithTTL(time.Minute))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	term, err := e.Campaign(ctx)
	require.NoError(t, err)
	list := strings.Join(addrs, ",")
	// Campaign returns once a majority holds the record: wait for the last master.
	require.Eventually(t, func() bool {
		in, err := leadership.Inspect(ctx, client, "relay")
		return err == nil && in.Records[0].Current && in.Records[1].Current && in.Records[2].Current
	}, 10*time.Second, 10*time.Millisecond, "the record is not on every master")

	code, out, errOut := runCmd(t, "inspect", "-addrs", list, "-fence-addr", counterAddr, "-role", "relay", "-o", "json")
	require.Equal(t, exitOK, code, errOut)
	var in struct {
		Role, Resource, Holder string
		Leading                bool
		Leader                 *struct {
			Identity string
			Fence    uint64
		}
		FenceCounter *uint64 `json:"fence_counter"`
		Masters      []struct {
			Addr, Token, Identity string
			TTLms                 int64  `json:"ttl_ms"`
			TermFence             uint64 `json:"term_fence"`
			RecordCurrent         bool   `json:"record_current"`
		}
	}
	require.NoError(t, json.Unmarshal([]byte(out), &in), out)
	assert.Equal(t, "relay", in.Role)
	assert.Equal(t, "leader:{relay}", in.Resource)
	assert.True(t, in.Leading)
	require.NotNil(t, in.Leader, out)
	assert.Equal(t, "relay-host:42", in.Leader.Identity)
	assert.Equal(t, term.Fence(), in.Leader.Fence)
	require.NotNil(t, in.FenceCounter, out)
	assert.Equal(t, term.Fence(), *in.FenceCounter)
	assert.NotEmpty(t, in.Holder)
	require.Len(t, in.Masters, 3)
	for _, m := range in.Masters {
		assert.Equal(t, in.Holder, m.Token)
		assert.Greater(t, m.TTLms, int64(30_000))
		assert.Equal(t, "relay-host:42", m.Identity)
		assert.Equal(t, term.Fence(), m.TermFence)
		assert.True(t, m.RecordCurrent)
	}
	code, out, errOut = runCmd(t, "inspect", "-addrs", list, "-fence-addr", counterAddr, "-role", "relay")
	assert.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, fmt.Sprintf("leader: relay-host:42 (term fence %d)", term.Fence()))
	assert.Contains(t, out, "holder: "+in.Holder)
	assert.Contains(t, out, fmt.Sprintf("fence counter: %d (the last minted)", term.Fence()))
	last, ok, err := counter.Last(ctx, "leader:{relay}")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, term.Fence(), last, "inspect -role minted a fence")

	require.NoError(t, term.Resign(ctx))
	code, out, errOut = runCmd(t, "inspect", "-addrs", list, "-role", "relay")
	assert.Equal(t, exitNotHeld, code, errOut)
	assert.Contains(t, out, "leader: - (no majority names one)")
	assert.Contains(t, out, "holder: -")
	// docs/operations.md quotes these lines as the command prints them.
	doc, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	for _, line := range []string{"`leader: <identity> (term fence N)`", "`leader: - (no\nmajority names one)`", "`fence counter: N (the last\nminted)`"} {
		assert.Contains(t, strings.Join(strings.Fields(string(doc)), " "), strings.Join(strings.Fields(line), " "), "docs/operations.md lost a line of inspect -role")
	}

	dead := make([]string, 2)
	for i := range dead {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		dead[i] = l.Addr().String()
		require.NoError(t, l.Close()) // nothing listens there now: connections are refused
	}
	code, _, errOut = runCmd(t, "inspect", "-addrs", strings.Join(append(addrs[:1:1], dead...), ","), "-role", "relay", "-node-timeout", "200ms")
	assert.Equal(t, exitError, code, errOut)
	assert.Contains(t, errOut, "quorum unavailable")

	for _, args := range [][]string{
		{"inspect", "-addrs", list, "-role", "relay", "-resource", "job:1"},
		{"inspect", "-addrs", list, "-role", "a{b}"},
		{"inspect", "-addrs", list, "-role", "a\nb"},
		{"inspect", "-addrs", list, "-role", "relay", "-o", "csv"},
		{"release", "-addrs", list, "-role", "relay", "-token", "t"},
	} {
		code, _, errOut := runCmd(t, args...)
		assert.Equal(t, exitUsage, code, "%q: %s", args, errOut)
	}
}
