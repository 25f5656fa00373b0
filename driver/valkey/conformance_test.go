package valkey_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"quorumlock.dev/driver"
	"quorumlock.dev/driver/drivertest"
	valkeydriver "quorumlock.dev/driver/valkey"
)

// client returns a valkey client of the one server at addr, closed when
// t ends.
func client(t testing.TB, addr string) valkey.Client {
	t.Helper()
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// BenchmarkLock: the lock on valkey clients, which pipeline every command.
func BenchmarkLock(b *testing.B) {
	drivertest.Bench(b, func(t testing.TB, addr string) driver.Conn { return valkeydriver.Conn(client(t, addr)) })
}

func TestConformance(t *testing.T) {
	drivertest.Run(t, func(t testing.TB, addr string) driver.Conn { return valkeydriver.Conn(client(t, addr)) })
}
