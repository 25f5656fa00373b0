package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/driver/goredis"
	"quorumlock.dev/fence"
	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
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
