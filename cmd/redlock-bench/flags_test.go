package main

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
)

// TestEmptyListItemsRefused: a list flag with an empty item ("1,,8", a
// trailing comma) is a usage error that names the flag, in every command
// that reads one, not an item silently skipped.
func TestEmptyListItemsRefused(t *testing.T) {
	for _, args := range [][]string{
		{"-c", "1,,8"},
		{"-c", "1,8,"},
		{"-backend", "addrs", "-addrs", "127.0.0.1:1,,127.0.0.1:2"},
		{"check", "-addrs", "127.0.0.1:1,"},
		{"inspect", "-addrs", ",127.0.0.1:1", "-resource", "r"},
		{"choose", "-c", "1,,2"},
		{"choose", "-options", "redlock,,single"},
	} {
		code, _, errOut := runCmd(t, args...)
		assert.Equal(t, exitUsage, code, "%q", args)
		assert.Contains(t, errOut, "is empty", "%q: %s", args, errOut)
	}
}

// TestSkipVerifyWarned: an address that turns certificate checks off is
// named in a warning, with its password redacted; one that keeps them on
// is not.
func TestSkipVerifyWarned(t *testing.T) {
	_, _, errOut := runCmd(t, "check", "-addrs", "rediss://:secret@127.0.0.1:1/?skip_verify=true", "-node-timeout", "50ms")
	assert.Contains(t, errOut, "turns certificate checks off")
	assert.Contains(t, errOut, "127.0.0.1:1")
	assert.NotContains(t, errOut, "secret")
	_, _, errOut = runCmd(t, "check", "-addrs", "rediss://127.0.0.1:1", "-node-timeout", "50ms")
	assert.NotContains(t, errOut, "certificate checks off")
}

// TestConnectionHints: a server that wants a password, and a port that is
// not Redis, answer with what to do, not a bare NOAUTH or EOF.
func TestConnectionHints(t *testing.T) {
	s := redistest.Start(t, redisserver.Options{Password: "pw"})
	code, out, _ := runCmd(t, "check", "-addrs", s.Addr(), "-node-timeout", "2s")
	assert.Equal(t, exitError, code)
	assert.Contains(t, out, "the server wants a password: -password-env")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close() // not Redis: no reply at all
		}
	}()
	code, out, _ = runCmd(t, "check", "-addrs", ln.Addr().String(), "-node-timeout", "2s")
	assert.Equal(t, exitError, code)
	assert.Contains(t, out, "is it a Redis server", out)
}
