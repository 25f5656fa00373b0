package main

import (
	"encoding/json"
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
)

func TestCheckBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"-addrs", "127.0.0.1:1", "-o", "csv"},
		{"-addrs", "127.0.0.1:1", "-node-timeout", "0s"},
		{"-addrs", "127.0.0.1:1", "extra"},
	} {
		code, _, errOut := runCmd(t, append([]string{"check"}, args...)...)
		assert.Equal(t, exitUsage, code, "%v: %s", args, errOut)
	}
	// A bad address is said once as a configuration error, not twice.
	code, _, errOut := runCmd(t, "check", "-addrs", "bogus://x")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, `check: invalid configuration: master address bogus://x: scheme "bogus"`)
	assert.NotContains(t, errOut, "bad backend configuration")
	code, _, errOut = runCmd(t, "check", "-h")
	assert.Equal(t, exitOK, code)
	assert.Contains(t, errOut, "-fence-addr")
	code, _, errOut = runCmd(t, "-h")
	assert.Equal(t, exitOK, code)
	assert.Contains(t, errOut, "redlock-bench check", "the main usage names the subcommand")
}

type checkJSON struct {
	Masters []struct {
		Node, Addr string
		Findings   []struct{ Setting, Source, Value, Status, Why string }
	}
	Fence *struct {
		Node     string
		Findings []struct{ Setting, Source, Value, Status string }
	}
	Worst string
}

func TestCheckCommand(t *testing.T) {
	t.Parallel()
	good := redistest.StartN(t, 2, redisserver.Options{})
	evicting := redistest.Start(t, redisserver.Options{Args: []string{"--maxmemory-policy", "allkeys-lru"}})
	counter := redistest.Start(t, redisserver.Options{Args: []string{"--appendonly", "yes", "--appendfsync", "always"}})
	addrs := good[0].Addr() + "," + good[1].Addr()

	t.Run("warnings exit 0", func(t *testing.T) {
		code, out, errOut := runCmd(t, "check", "-addrs", addrs, "-fence-addr", counter.Addr(), "-o", "json")
		require.Equal(t, exitOK, code, errOut)
		var rep checkJSON
		require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
		require.Len(t, rep.Masters, 2)
		assert.Equal(t, good[0].Addr(), rep.Masters[0].Addr)
		assert.Equal(t, "warning", rep.Worst, "no persistence on the masters")
		require.NotNil(t, rep.Fence)
		for _, f := range rep.Fence.Findings {
			assert.Equal(t, "ok", f.Status, f.Setting)
		}
		for _, n := range rep.Masters {
			for _, f := range n.Findings {
				assert.Equal(t, "server", f.Source, "the tool's own go-redis options are left out")
				assert.NotEmpty(t, f.Why, f.Setting)
			}
		}
	})
	t.Run("a problem exits 1", func(t *testing.T) {
		code, out, errOut := runCmd(t, "check", "-addrs", addrs+","+evicting.Addr())
		assert.Equal(t, exitError, code, errOut)
		assert.Contains(t, out, "SETTING")
		var line string
		for l := range strings.Lines(out) {
			if strings.Contains(l, "master 2") && strings.Contains(l, "maxmemory-policy") {
				line = l
			}
		}
		assert.Contains(t, line, "allkeys-lru")
		assert.Contains(t, line, "problem")
		assert.Contains(t, out, "worst: problem")
	})
	t.Run("the counter on a master is refused", func(t *testing.T) {
		code, _, errOut := runCmd(t, "check", "-addrs", addrs, "-fence-addr", good[0].Addr())
		assert.Equal(t, exitUsage, code)
		assert.Contains(t, errOut, "fence counter")
	})
}

// TestCheckUnreachableIsProblem: a node that does not answer makes check
// exit 1, and the report says problem, in the node's reachable line and in
// the worst status, text and JSON alike: what is printed agrees with the
// exit status.
func TestCheckUnreachableIsProblem(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now: connections are refused

	code, out, errOut := runCmd(t, "check", "-addrs", addr, "-node-timeout", "200ms")
	assert.Equal(t, exitError, code, errOut)
	var reach string
	for l := range strings.Lines(out) {
		if strings.Contains(l, "reachable") {
			reach = l
		}
	}
	assert.Contains(t, reach, addr)
	assert.Contains(t, reach, "problem", out)
	assert.Contains(t, out, "worst: problem\n")
	assert.NotContains(t, out, "worst: warning")

	code, out, errOut = runCmd(t, "check", "-addrs", addr, "-node-timeout", "200ms", "-o", "json")
	assert.Equal(t, exitError, code, errOut)
	var rep checkJSON
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	assert.Equal(t, "problem", rep.Worst)
	require.Len(t, rep.Masters, 1)
	var status string
	for _, f := range rep.Masters[0].Findings {
		if f.Setting == "reachable" {
			status = f.Status
		}
	}
	assert.Equal(t, "problem", status)
}

// TestCheckTLSAndPassword: check reaches servers as they are run, TLS with
// an ACL user whose password comes from the environment or the URL, and
// prints no secret, whatever the outcome.
func TestCheckTLSAndPassword(t *testing.T) {
	servers, ca := tlsServers(t, 2)
	t.Setenv("BENCH_TEST_REDIS_PASSWORD", tlsPassword)
	addrs := "rediss://bench@" + servers[0].Addr() + ",rediss://bench:" + tlsPassword + "@" + servers[1].Addr()

	code, out, errOut := runCmd(t, "check", "-addrs", addrs, "-tls-ca", ca, "-password-env", "BENCH_TEST_REDIS_PASSWORD", "-o", "json")
	require.Equal(t, exitOK, code, errOut)
	assertNoSecret(t, out, errOut, tlsPassword)
	var rep checkJSON
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.Len(t, rep.Masters, 2)
	for i, n := range rep.Masters {
		assert.Equal(t, servers[i].Addr(), n.Addr)
		var version string
		for _, f := range n.Findings {
			if f.Setting == "redis_version" {
				version = f.Value
			}
		}
		assert.Regexp(t, `^[0-9]`, version, "the report of master %d was not read over TLS", i)
	}

	t.Setenv("BENCH_TEST_REDIS_PASSWORD", wrongPassword)
	code, out, errOut = runCmd(t, "check", "-addrs", "rediss://bench@"+servers[0].Addr(), "-tls-ca", ca, "-password-env", "BENCH_TEST_REDIS_PASSWORD")
	assert.Equal(t, exitError, code, "a wrong password is a failure: %s", out)
	assertNoSecret(t, out, errOut, tlsPassword, wrongPassword)

	code, _, errOut = runCmd(t, "check", "-addrs", servers[0].Addr(), "-tls-ca", ca)
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "no address is rediss://")
}
