package goredis_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/driver"
	"quorumlock.dev/driver/drivertest"
	"quorumlock.dev/driver/goredis"
	"quorumlock.dev/internal/harness/redistest"
)

func plain(t testing.TB, addr string) driver.Conn { return goredis.Conn(redistest.Client(t, addr)) }

func TestConformance(t *testing.T) { drivertest.RunFull(t, plain) }

// BenchmarkLock: plain go-redis clients (a pool of connections per master).
func BenchmarkLock(b *testing.B) { drivertest.Bench(b, plain) }

// TestConformanceAutoPipeliner: go-redis's experimental auto-pipelining
// client, one batched connection per master.
func TestConformanceAutoPipeliner(t *testing.T) { drivertest.RunFull(t, autoPipelined) }

// BenchmarkLockAutoPipeliner: the same through go-redis's AutoPipeliner.
func BenchmarkLockAutoPipeliner(b *testing.B) { drivertest.Bench(b, autoPipelined) }

func autoPipelined(t testing.TB, addr string) driver.Conn {
	ap, err := redistest.Client(t, addr).AutoPipeline()
	require.NoError(t, err)
	t.Cleanup(func() { _ = ap.Close() })
	return goredis.Conn(ap)
}

var _ goredis.Client = (*redis.AutoPipeliner)(nil)
