package backend

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
)

const secret = "S3cret-Pa55-e1f0"

func TestRedact(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"127.0.0.1:6379", "127.0.0.1:6379"},
		{"redis://127.0.0.1:6379", "redis://127.0.0.1:6379"},
		{"rediss://bench@r1:6380/2", "rediss://bench@r1:6380/2"},
		{"redis://bench:" + secret + "@r1:6379", "redis://bench:xxxxx@r1:6379"},
		{"redis://:" + secret + "@r1:6379/0", "redis://:xxxxx@r1:6379/0"},
		// Does not parse (bad port): everything before the last "@" goes.
		{"redis://u:" + secret + "@r1:nope", "redis://xxxxx@r1:nope"},
		{"redis://u:p@" + secret + "@r1:nope", "redis://xxxxx@r1:nope"},
	}
	for _, tt := range tests {
		got := Redact(tt.in)
		assert.Equal(t, tt.want, got, tt.in)
		assert.NotContains(t, got, secret)
	}
}

func TestParseServerErrorsCarryNoPassword(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{
		"redis://u:" + secret + "@127.0.0.1:nope",
		"redis://u:" + secret + "@127.0.0.1:1/nodb",
		"redis://u:" + secret + "@127.0.0.1:1?bogus=1",
		"unix://u:" + secret + "@/tmp/redis.sock",
		"redis://u:" + secret + "\x7f@127.0.0.1:1",
	} {
		_, err := parseServer("master", addr, "", nil)
		require.Error(t, err, addr)
		assert.ErrorIs(t, err, ErrConfig)
		assert.NotContains(t, err.Error(), secret)
	}
}

func TestParseServerPassword(t *testing.T) {
	t.Parallel()
	s, err := parseServer("master", "rediss://bench@127.0.0.1:1/3", "fromenv", nil)
	require.NoError(t, err)
	assert.Equal(t, "bench", s.opts.Username)
	assert.Equal(t, "fromenv", s.opts.Password, "Config.Password fills a URL without one")
	assert.Equal(t, 3, s.opts.DB)
	assert.NotNil(t, s.opts.TLSConfig)
	s, err = parseServer("master", "redis://bench:inurl@127.0.0.1:1", "fromenv", nil)
	require.NoError(t, err)
	assert.Equal(t, "inurl", s.opts.Password, "the URL's password wins")
	assert.Nil(t, s.opts.TLSConfig)
	s, err = parseServer("master", "127.0.0.1:1", "fromenv", nil)
	require.NoError(t, err)
	assert.Equal(t, "fromenv", s.opts.Password)
}

func TestOpenTLSWithPassword(t *testing.T) {
	t.Parallel()
	files, err := redisserver.SelfSigned(t.TempDir())
	require.NoError(t, err)
	srv := redistest.Start(t, redisserver.Options{TLS: files, Password: secret})
	url := "rediss://" + srv.Addr()

	e, err := Open(t.Context(), Config{Kind: "addrs", Masters: 1, Addrs: []string{url}, Password: secret, TLSCAFile: files.CAFile})
	require.NoError(t, err)
	assert.Equal(t, []string{srv.Addr()}, e.Masters, "traffic goes to host:port")
	assert.Equal(t, url, e.Servers[0].Addr)
	assert.Regexp(t, `^[0-9]`, e.Servers[0].Version)
	o := e.ClientOptions(srv.Addr())
	assert.Equal(t, secret, o.Password)
	require.NotNil(t, o.TLSConfig)
	assert.NotNil(t, o.TLSConfig.RootCAs)
	o.Password = "changed"
	assert.Equal(t, secret, e.ClientOptions(srv.Addr()).Password, "each call returns a copy")
	assert.Nil(t, e.ClientOptions("127.0.0.1:1").TLSConfig, "an address not of the Env gets plain options")
	require.NoError(t, e.Close(context.Background()))

	// The password in the URL: printed redacted, in the report and in a refusal.
	bad := "rediss://default:" + secret + "x@" + srv.Addr()
	_, err = Open(t.Context(), Config{Kind: "addrs", Masters: 1, Addrs: []string{bad}, TLSCAFile: files.CAFile})
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrUnreachable, "the server answered")
	assert.NotContains(t, err.Error(), secret)
	assert.True(t, strings.HasPrefix(err.Error(), "backend: master rediss://default:xxxxx@"+srv.Addr()+": "), err.Error())
	assert.Contains(t, err.Error(), "WRONGPASS")

	// Without the CA the certificate does not verify.
	_, err = Open(t.Context(), Config{Kind: "addrs", Masters: 1, Addrs: []string{url}, Password: secret})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "certificate")
	assert.NotContains(t, err.Error(), secret)
}

func TestScrubError(t *testing.T) {
	t.Parallel()
	assert.NoError(t, scrubError(nil, []string{secret}))
	plain := fmt.Errorf("%w: connection refused", ErrUnreachable)
	assert.Same(t, plain, scrubError(plain, []string{"", secret}), "an error without secrets is kept as it is")
	err := scrubError(fmt.Errorf("%w: AUTH %s refused", ErrUnreachable, secret), []string{"", secret})
	assert.Equal(t, "backend: server unreachable: AUTH xxxxx refused", err.Error())
	assert.ErrorIs(t, err, ErrUnreachable)
}
