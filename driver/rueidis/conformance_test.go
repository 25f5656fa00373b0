package rueidis_test

import (
	"testing"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/driver"
	"quorumlock.dev/driver/drivertest"
	rueidisdriver "quorumlock.dev/driver/rueidis"
)

// client returns a rueidis client of the one server at addr, closed when
// t ends.
func client(t testing.TB, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// BenchmarkLock: the lock on rueidis clients, which pipeline every command.
func BenchmarkLock(b *testing.B) {
	drivertest.Bench(b, func(t testing.TB, addr string) driver.Conn { return rueidisdriver.Conn(client(t, addr)) })
}

func TestConformance(t *testing.T) {
	drivertest.Run(t, func(t testing.TB, addr string) driver.Conn { return rueidisdriver.Conn(client(t, addr)) })
}
