package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/cmd/redlock-bench/internal/report"
	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
)

// The secrets of these tests: distinctive, so that finding one in output means a leak.
const (
	tlsPassword   = "Tls-Pa55word-7f3a"
	wrongPassword = "Wr0ng-Pa55word-c2d9"
	pgSecret      = "Pg-Pa55word-91be"
)

// tlsServers starts n TLS-only redis-servers whose default user and ACL user "bench" both
// need tlsPassword, and returns them with the path of the CA their certificates chain to.
func tlsServers(t *testing.T, n int) ([]*redisserver.Server, string) {
	t.Helper()
	files, err := redisserver.SelfSigned(t.TempDir())
	require.NoError(t, err)
	servers := redistest.StartN(t, n, redisserver.Options{TLS: files, Password: tlsPassword,
		Args: []string{"--user", "bench", "on", ">" + tlsPassword, "~*", "&*", "+@all"}})
	return servers, files.CAFile
}

func tlsServer(t *testing.T) (*redisserver.Server, string) {
	t.Helper()
	servers, ca := tlsServers(t, 1)
	return servers[0], ca
}

// tlsClient is a client of s as user bench.
func tlsClient(t *testing.T, s *redisserver.Server, ca string) *redis.Client {
	t.Helper()
	pem, err := os.ReadFile(ca)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(pem))
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: "bench", Password: tlsPassword, MaxRetries: -1,
		TLSConfig: &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func assertNoSecret(t *testing.T, out, errOut string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		assert.NotContains(t, out, s, "stdout carries a secret")
		assert.NotContains(t, errOut, s, "stderr carries a secret")
	}
}

func TestTLSServerWithPasswordFromEnv(t *testing.T) {
	servers, ca := tlsServers(t, 2)
	t.Setenv("BENCH_TEST_REDIS_PASSWORD", tlsPassword)
	master, fence := "rediss://bench@"+servers[0].Addr(), "rediss://bench@"+servers[1].Addr()
	args := []string{"-addrs", master, "-fence-addr", fence, "-fence", "-tls-ca", ca, "-password-env", "BENCH_TEST_REDIS_PASSWORD",
		"-masters", "1", "-n", "50", "-c", "1", "-rounds", "1"}

	code, out, errOut := runCmd(t, append(args, "-o", "json")...)
	require.Equal(t, exitOK, code, errOut)
	assertNoSecret(t, out, errOut, tlsPassword)
	var rep report.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	assert.Equal(t, []string{"master " + master, "single " + master, "fence " + fence}, roleAddrs(rep.Servers),
		"the report names the servers as the user did")
	for _, sv := range rep.Servers {
		assert.Regexp(t, `^[0-9]`, sv.Version)
	}
	require.NotEmpty(t, rep.Results)
	for _, r := range rep.Results {
		assert.Positive(t, r.Acquired, "%s", r.Mode)
	}

	// A password in the URL works as well and is shown redacted; text output too.
	inURL := "rediss://bench:" + tlsPassword + "@" + servers[0].Addr()
	code, out, errOut = runCmd(t, "-addrs", inURL, "-tls-ca", ca, "-masters", "1", "-n", "50", "-c", "1", "-rounds", "1", "-o", "text")
	require.Equal(t, exitOK, code, errOut)
	assertNoSecret(t, out, errOut, tlsPassword)
	assert.Contains(t, out, "rediss://bench:xxxxx@"+servers[0].Addr())

	// Cleanup authenticated too: no key of either run is left.
	for _, s := range servers {
		keys, err := tlsClient(t, s, ca).Keys(t.Context(), "*redlock-bench-*").Result()
		require.NoError(t, err)
		assert.Empty(t, keys, "the runs left keys on %s", s.Addr())
	}
}

func roleAddrs(servers []report.ServerInfo) []string {
	var out []string
	for _, s := range servers {
		out = append(out, s.Role+" "+s.Addr)
	}
	return out
}

func TestTLSServerWrongPassword(t *testing.T) {
	s, ca := tlsServer(t)
	tests := []struct {
		name string
		args []string
	}{
		{"from env", []string{"-addrs", "rediss://bench@" + s.Addr(), "-password-env", "BENCH_TEST_REDIS_PASSWORD"}},
		{"in URL", []string{"-addrs", "rediss://bench:" + wrongPassword + "@" + s.Addr()}},
		{"no password", []string{"-addrs", "rediss://bench@" + s.Addr()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("BENCH_TEST_REDIS_PASSWORD", wrongPassword)
			code, out, errOut := runCmd(t, append(tt.args, "-tls-ca", ca, "-masters", "1", "-n", "50", "-c", "1")...)
			assert.Equal(t, exitError, code)
			assert.Empty(t, out)
			assertNoSecret(t, out, errOut, tlsPassword, wrongPassword)
			assert.Equal(t, 1, strings.Count(errOut, "\n"), "one clear line: %q", errOut)
			assert.Contains(t, errOut, "master rediss://bench")
			assert.Contains(t, errOut, s.Addr())
			assert.Regexp(t, "WRONGPASS|NOAUTH", errOut)
		})
	}
}

func TestTLSServerUnknownCA(t *testing.T) {
	s, _ := tlsServer(t)
	other, err := redisserver.SelfSigned(t.TempDir())
	require.NoError(t, err)
	t.Setenv("BENCH_TEST_REDIS_PASSWORD", tlsPassword)
	code, out, errOut := runCmd(t, "-addrs", "rediss://bench@"+s.Addr(), "-password-env", "BENCH_TEST_REDIS_PASSWORD",
		"-tls-ca", other.CAFile, "-masters", "1", "-n", "50", "-c", "1")
	assert.Equal(t, exitError, code)
	assertNoSecret(t, out, errOut, tlsPassword)
	assert.Contains(t, errOut, "certificate")
}

func TestSecretsNeverPrinted(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := ln.Addr().String()
	require.NoError(t, ln.Close())
	_, port, _ := net.SplitHostPort(dead)
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead2 := ln.Addr().String()
	require.NoError(t, ln.Close())

	tests := []struct {
		name string
		args []string
		code int
		want string // in stderr
	}{
		{"unreachable URL", []string{"-addrs", "redis://u:" + wrongPassword + "@" + dead}, exitError, "cannot reach master redis://u:xxxxx@" + dead},
		{"unreachable fence", []string{"-addrs", "redis://u:" + wrongPassword + "@" + dead, "-fence-addr", "redis://f:" + wrongPassword + "@" + dead2},
			exitError, "cannot reach master redis://u:xxxxx@" + dead},
		{"bad port", []string{"-addrs", "redis://u:" + wrongPassword + "@127.0.0.1:nope"}, exitUsage, "not a Redis URL"},
		{"bad scheme", []string{"-addrs", "http://u:" + wrongPassword + "@" + dead}, exitUsage, "want redis or rediss"},
		{"bad db", []string{"-addrs", "redis://u:" + wrongPassword + "@" + dead + "/x"}, exitUsage, "invalid database"},
		{"master twice", []string{"-addrs", "redis://u:" + wrongPassword + "@" + dead + "," + dead, "-masters", "2"}, exitUsage, "listed twice"},
		{"fence differs", []string{"-addrs", dead, "-fence-addr", "redis://u:" + wrongPassword + "@" + dead}, exitUsage, "other settings"},
		{"password env unset", []string{"-addrs", dead, "-password-env", "BENCH_TEST_NO_SUCH_VARIABLE"}, exitUsage, "not set"},
		{"tls-ca without addrs", []string{"-tls-ca", "ca.pem"}, exitUsage, "need -addrs"},
		{"tls-ca without rediss", []string{"-addrs", dead, "-tls-ca", "/dev/null"}, exitUsage, "TLS CA file"},
		{"fencing dead pg url", []string{"fencing", "-jobs", "10", "-pg-dsn", "postgres://u:" + pgSecret + "@" + dead + "/db"}, exitError, "cannot reach PostgreSQL"},
		{"fencing dead pg kv", []string{"fencing", "-jobs", "10", "-pg-dsn", "host=127.0.0.1 port=" + port + " user=u password=" + pgSecret + " dbname=db"}, exitError, "cannot reach PostgreSQL"},
		{"fencing bad pg", []string{"fencing", "-jobs", "10", "-pg-dsn", "postgres://u:" + pgSecret + "@127.0.0.1:nope/db"}, exitUsage, "-pg-dsn is not"},
		{"chaos bad pg", []string{"chaos", "-store", "postgres", "-pg-dsn", "postgres://u:" + pgSecret + "@127.0.0.1:nope/db"}, exitUsage, "-pg-dsn is not"},
		{"chaos pg without store", []string{"chaos", "-pg-dsn", "postgres://u:" + pgSecret + "@127.0.0.1/db"}, exitUsage, "needs -store postgres"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if args[0] != "fencing" && args[0] != "chaos" {
				args = append([]string{"-masters", "1", "-n", "10", "-c", "1"}, args...) // a case's -masters comes later and wins
			}
			code, out, errOut := runCmd(t, args...)
			assert.Equal(t, tt.code, code, errOut)
			assertNoSecret(t, out, errOut, wrongPassword, pgSecret)
			assert.Contains(t, errOut, tt.want)
		})
	}
}
