package main

import (
	"context"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// configErrors are command lines with one configuration error each, and
// what the line that reports it must say: the flag to fix, or, where the
// error is found by the lock's New (check, inspect) or names two flags
// that conflict, the setting.
var configErrors = []struct {
	args []string
	want string
}{
	// The benchmark (no subcommand).
	{[]string{"-d", "2x"}, "-d"},
	{[]string{"-d", "0"}, "-d"},
	{[]string{"-n", "-5"}, "-n"},
	{[]string{"-n", "5", "-d", "1s"}, "-n and -d"},
	{[]string{"-c", "a"}, "-c"},
	{[]string{"-c", "0"}, "-c"},
	{[]string{"-c", "-4"}, "-c"},
	{[]string{"-masters", "0"}, "-masters"},
	{[]string{"-masters", "17"}, "-masters"},
	{[]string{"-scenario", "nope"}, "-scenario"},
	{[]string{"-ttl", "10ms"}, "-ttl"},
	{[]string{"-node-timeout", "0"}, "-node-timeout"},
	{[]string{"-keys", "0"}, "-keys"},
	{[]string{"-hold", "-1ms"}, "-hold"},
	{[]string{"-rounds", "0"}, "-rounds"},
	{[]string{"-scenario", "contended", "-clients", "-1"}, "-clients"},
	{[]string{"-clients", "2"}, "-clients"},
	{[]string{"-scenario", "contended", "-procs", "65"}, "-procs"},
	{[]string{"-procs", "2"}, "-procs"},
	{[]string{"-scenario", "slow", "-raw"}, "-raw"},
	{[]string{"-scenario", "slow", "-delay", "0"}, "-delay"},
	{[]string{"-scenario", "dead", "-dead", "6"}, "-dead"},
	{[]string{"-driver", "redigo"}, "-driver"},
	{[]string{"-o", "xml"}, "-o"},
	{[]string{"-plot", "x.gif"}, "-plot"},
	{[]string{"-backend", "nope"}, "-backend"},
	{[]string{"-backend", "addrs"}, "-addrs"},
	{[]string{"-backend", "redis-server", "-addrs", "127.0.0.1:1"}, "-addrs and -backend"},
	{[]string{"-single-addr", "127.0.0.1:1"}, "-single-addr"},
	{[]string{"-addrs", "127.0.0.1:1", "-password-env", "REDLOCK_BENCH_TEST_UNSET"}, "-password-env"},
	{[]string{"-addrs", "127.0.0.1:1"}, "-masters"},
	{[]string{"-addrs", "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", "-masters", "3", "-scenario", "scale"}, "-addrs: 3 addresses for 9 masters"},
	{[]string{"-masters", "1", "-addrs", "redis://[::1"}, "-addrs"},
	{[]string{"-masters", "1", "-addrs", "127.0.0.1:1", "-single-addr", "ftp://x"}, "-single-addr"},
	{[]string{"-masters", "1", "-addrs", "127.0.0.1:1", "-fence-addr", "127.0.0.1:"}, "-fence-addr"},
	{[]string{"-masters", "1", "-addrs", "127.0.0.1:1", "-tls-ca", "/nonexistent/ca.pem"}, "-tls-ca"},
	{[]string{"-masters", "1", "-addrs", "127.0.0.1:1", "-fence"}, "-fence-addr"},
	{[]string{"-masters", "2", "-addrs", "127.0.0.1:1,127.0.0.1:1"}, "-addrs: master 127.0.0.1:1 listed twice"},
	{[]string{"-nope"}, "-nope"},
	{[]string{"extra"}, `"extra"`},

	{[]string{"chaos", "-scenario", "nope"}, "scenario"},
	{[]string{"chaos", "-store", "x"}, "-store"},
	{[]string{"chaos", "-pg-dsn", "postgres://u@127.0.0.1:1/db"}, "-pg-dsn"},
	{[]string{"chaos", "-store", "postgres", "-pg-dsn", "host=x port=notaport"}, "-pg-dsn"},
	{[]string{"chaos", "-store", "mysql", "-mysql-dsn", "u@bad(x"}, "-mysql-dsn"},
	{[]string{"chaos", "-o", "xml"}, "-o"},
	{[]string{"chaos", "-d", "1s"}, "-d"},
	// Found by chaos.Check before a throw-away store server would start.
	{[]string{"chaos", "-runs", "-1", "-store", "postgres"}, "-runs"},
	{[]string{"chaos", "-workers", "1", "-store", "mysql"}, "-workers"},
	{[]string{"chaos", "-ttl", "100ms"}, "-ttl"},
	{[]string{"chaos", "-node-timeout", "-1ms"}, "-node-timeout"},

	{[]string{"choose", "-options", "nope"}, "-options"},
	{[]string{"choose", "-c", "0"}, "-c"},
	{[]string{"choose", "-backend", "x"}, "-backend"},
	{[]string{"choose", "-ttl", "500ms"}, "-ttl"},
	{[]string{"choose", "-lease", "10ms"}, "-lease"},
	{[]string{"choose", "-d", "0"}, "-d"},
	{[]string{"choose", "-keys", "0"}, "-keys"},
	{[]string{"choose", "-o", "xml"}, "-o"},
	{[]string{"choose", "-plot", "a.gif"}, "-plot"},

	{[]string{"fencing", "-jobs", "0"}, "-jobs"},
	{[]string{"fencing", "-masters", "0"}, "-masters"},
	{[]string{"fencing", "-c", "0"}, "-c"},
	{[]string{"fencing", "-skus", "0"}, "-skus"},
	{[]string{"fencing", "-ttl", "10ms"}, "-ttl"},
	{[]string{"fencing", "-pause", "10ms"}, "-pause"},
	{[]string{"fencing", "-pause-rate", "2"}, "-pause-rate"},
	{[]string{"fencing", "-stall", "-1s"}, "-stall"},
	{[]string{"fencing", "-cost-samples", "-1"}, "-cost-samples"},
	{[]string{"fencing", "-store", "x"}, "-store"},
	{[]string{"fencing", "-store", "memory", "-pg-dsn", "postgres://u@127.0.0.1:1/db"}, "PostgreSQL DSN with -store memory"},
	{[]string{"fencing", "-pg-dsn", "host=x port=notaport"}, "-pg-dsn"},
	{[]string{"fencing", "-store", "mysql", "-mysql-dsn", "u@bad(x"}, "-mysql-dsn"},
	{[]string{"fencing", "-store", "mysql"}, "-store mysql needs its DSN"},
	{[]string{"fencing", "-o", "csv"}, "-o"},
	{[]string{"fencing", "-backend", "x"}, "-backend"},

	{[]string{"check"}, "-addrs"},
	{[]string{"check", "-addrs", "127.0.0.1:1", "-o", "xml"}, "-o"},
	{[]string{"check", "-addrs", "127.0.0.1:1", "-node-timeout", "0"}, "-node-timeout"},
	{[]string{"check", "-addrs", "redis://[::1"}, "-addrs"},
	{[]string{"check", "-addrs", "127.0.0.1:1", "-tls-ca", "/nonexistent/ca.pem"}, "-tls-ca"},
	{[]string{"check", "-addrs", "127.0.0.1:1", "-password-env", "REDLOCK_BENCH_TEST_UNSET"}, "-password-env"},
	{[]string{"check", "-addrs", "127.0.0.1:1", "-fence-addr", "127.0.0.1:1"}, "the fence counter is on master 0 (127.0.0.1:1); it needs a node of its own (-fence-addr)"},

	{[]string{"inspect", "-addrs", "127.0.0.1:1"}, "-resource"},
	{[]string{"inspect", "-resource", "r"}, "-addrs"},
	{[]string{"inspect", "-addrs", "127.0.0.1:1", "-resource", "r", "-role", "x"}, "-role"},
	{[]string{"inspect", "-addrs", "127.0.0.1:1", "-resource", "r", "-o", "xml"}, "-o"},
	{[]string{"inspect", "-addrs", "127.0.0.1:1,127.0.0.1:1", "-resource", "r"}, "masters 0 and 1 are both 127.0.0.1:1 (-addrs)"},

	{[]string{"release", "-addrs", "127.0.0.1:1", "-resource", "r"}, "-token"},
	{[]string{"release", "-addrs", "127.0.0.1:1", "-resource", "r", "-token", "t", "-force"}, "-force"},
	{[]string{"release", "-addrs", "127.0.0.1:1", "-token", "t"}, "-resource"},
	{[]string{"release", "-addrs", "127.0.0.1:1", "-resource", "r", "-token", "t", "-node-timeout", "x"}, "-node-timeout"},
}

// TestConfigErrorsExit2: every configuration error of every subcommand
// exits 2 and says, on the first line of stderr, which flag to fix, before
// the usage; nothing runs (the context is cancelled, so a command that
// went on to start servers or measure would end with another status or
// write a report).
func TestConfigErrorsExit2(t *testing.T) {
	t.Setenv("REDLOCK_BENCH_TEST_UNSET", "")
	for _, tc := range configErrors {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			var out, errOut strings.Builder
			start := time.Now()
			code := run(ctx, tc.args, &out, &errOut)
			assert.Less(t, time.Since(start), 10*time.Second, "a configuration error is found before anything starts")
			assert.Equal(t, exitUsage, code, "stderr: %s", errOut.String())
			assert.Empty(t, out.String(), "no report")
			lines := strings.Split(errOut.String(), "\n")
			first := lines[0]
			for len(lines) > 1 && strings.Contains(first, "warning:") {
				lines = lines[1:]
				first = lines[0]
			}
			assert.Contains(t, first, tc.want, "the first line says what to fix: %s", errOut.String())
			if rest := strings.Join(lines[1:], "\n"); rest != "" {
				assert.True(t, strings.HasPrefix(rest, "usage: redlock-bench"), "one line, then nothing or the usage: %s", errOut.String())
			}
		})
	}
}

func TestNameFlags(t *testing.T) {
	fs := flag.NewFlagSet("redlock-bench fencing", flag.ContinueOnError)
	fs.Int("masters", 1, "")
	fs.Duration("node-timeout", 0, "")
	fs.Float64("pause-rate", 0, "")
	fs.Duration("pause", 0, "")
	fs.Int("c", 64, "workers taking jobs")
	fs.String("addrs", "", "")
	for msg, want := range map[string]string{
		"masters 0 outside 1..16":                       "-masters 0 outside 1..16",
		"ttl 1s below 10 node timeouts (50ms)":          "ttl 1s below 10 node timeouts (50ms)",
		"node timeout 0s is not positive":               "-node-timeout 0s is not positive",
		"pause rate 2 outside [0, 1]":                   "-pause-rate 2 outside [0, 1]",
		"pause 1s must outlast the ttl 2s":              "-pause 1s must outlast the ttl 2s",
		"allocjobs: workers 0 below 1":                  "allocjobs: -c 0 below 1",
		"master address x:y is not a host:port":         "master address x:y is not a host:port (-addrs)",
		"-masters 3 and the masters of -addrs disagree": "-masters 3 and the masters of -addrs disagree",
		"a paused holder":                               "a paused holder",
	} {
		assert.Equal(t, want, nameFlags(fs, msg), "%q", msg)
	}
}
