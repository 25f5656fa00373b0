package rueidisdriver_test

import (
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/driver"
	"quorumlock.dev/driver/drivertest"
	"quorumlock.dev/driver/internal/locktest"
	"quorumlock.dev/driver/rueidisdriver"
)

// client returns a rueidis client of the one server at addr, closed when
// t ends.
func client(t testing.TB, addr string) rueidis.Client {
	return clientOf(t, rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
}

// batched is client with the options docs/drivers.md gives for many
// goroutines per process: one pipelined connection per server, a flush
// that waits up to 100 µs for more calls while others are waiting, and a
// ConnWriteTimeout of a few seconds, as it advises where a master may
// hang (the calls of a hung server's pipeline end after it: 10 s by
// default).
func batched(t testing.TB, addr string) rueidis.Client {
	return clientOf(t, rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true,
		PipelineMultiplex: -1, MaxFlushDelay: 100 * time.Microsecond, ConnWriteTimeout: 2 * time.Second})
}

func clientOf(t testing.TB, opt rueidis.ClientOption) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(opt)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// BenchmarkLock: the lock on rueidis clients, which pipeline every command.
func BenchmarkLock(b *testing.B) {
	locktest.Bench(b, func(t testing.TB, addr string) driver.Conn { return rueidisdriver.Conn(client(t, addr)) })
}

// TestConformance: the seam's conformance kit, every capability required
// of a standalone client.
func TestConformance(t *testing.T) {
	drivertest.RunFull(t, func(t testing.TB, addr string) driver.Conn { return rueidisdriver.Conn(client(t, addr)) })
}

// TestLock: the lock and the fence end to end over the adapter.
func TestLock(t *testing.T) {
	locktest.Run(t, func(t testing.TB, addr string) driver.Conn { return rueidisdriver.Conn(client(t, addr)) })
}

// BenchmarkLockBatched: the same with the options of batched.
func BenchmarkLockBatched(b *testing.B) {
	locktest.Bench(b, func(t testing.TB, addr string) driver.Conn { return rueidisdriver.Conn(batched(t, addr)) })
}

// TestConformanceBatched: those options change how calls share a
// connection (a hung master's calls queue behind one another), not what
// the adapter promises.
func TestConformanceBatched(t *testing.T) {
	drivertest.RunFull(t, func(t testing.TB, addr string) driver.Conn { return rueidisdriver.Conn(batched(t, addr)) })
}

// TestLockBatched: the lock and the fence on those options.
func TestLockBatched(t *testing.T) {
	locktest.Run(t, func(t testing.TB, addr string) driver.Conn { return rueidisdriver.Conn(batched(t, addr)) })
}
