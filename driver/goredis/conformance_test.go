package goredis_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/driver"
	"quorumlock.dev/driver/drivertest"
	"quorumlock.dev/driver/goredis"
	"quorumlock.dev/driver/internal/locktest"
	"quorumlock.dev/internal/harness/redistest"
)

func plain(t testing.TB, addr string) driver.Conn { return goredis.Conn(redistest.Client(t, addr)) }

// TestConformance: the seam's conformance kit, every capability required.
func TestConformance(t *testing.T) { drivertest.RunFull(t, plain) }

// TestLock: the lock and the fence end to end over the adapter.
func TestLock(t *testing.T) { locktest.Run(t, plain) }

// BenchmarkLock: plain go-redis clients (a pool of connections per master).
func BenchmarkLock(b *testing.B) { locktest.Bench(b, plain) }

// TestConformanceAutoPipeliner: go-redis's experimental auto-pipelining
// client, one batched connection per master.
func TestConformanceAutoPipeliner(t *testing.T) { drivertest.RunFull(t, autoPipelined) }

// TestLockAutoPipeliner: the lock and the fence through the AutoPipeliner.
func TestLockAutoPipeliner(t *testing.T) { locktest.Run(t, autoPipelined) }

// BenchmarkLockAutoPipeliner: the same through go-redis's AutoPipeliner.
func BenchmarkLockAutoPipeliner(b *testing.B) { locktest.Bench(b, autoPipelined) }

func autoPipelined(t testing.TB, addr string) driver.Conn {
	ap, err := redistest.Client(t, addr).AutoPipeline()
	require.NoError(t, err)
	t.Cleanup(func() { _ = ap.Close() })
	return goredis.Conn(ap)
}

var _ goredis.Client = (*redis.AutoPipeliner)(nil)
