package redisserver_test

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
)

func TestTLSAndPassword(t *testing.T) {
	t.Parallel()
	files, err := redisserver.SelfSigned(t.TempDir())
	require.NoError(t, err)
	const password = "s3cret pass" // a space: the probe must send it as one argument
	s := redistest.Start(t, redisserver.Options{TLS: files, Password: password})

	v, err := s.Version(t.Context())
	require.NoError(t, err, "Version authenticates over TLS")
	assert.Regexp(t, `^[0-9]`, v)

	// Plain TCP gets no answer: the port speaks TLS only.
	assert.Error(t, ping(s.Addr(), time.Second))

	pem, err := os.ReadFile(files.CAFile)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(pem))
	client := func(pw string) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: s.Addr(), Password: pw, MaxRetries: -1,
			TLSConfig: &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	assert.NoError(t, client(password).Ping(t.Context()).Err(), "the certificate verifies against ca.pem")
	err = client("wrong").Ping(t.Context()).Err()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "WRONGPASS")

	// Restart keeps the TLS port and the password.
	require.NoError(t, s.Kill())
	require.NoError(t, s.Restart(t.Context()))
	assert.NoError(t, client(password).Ping(t.Context()).Err())
}
