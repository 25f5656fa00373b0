package goredis_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/driver"
	"quorumlock.dev/driver/drivertest"
	"quorumlock.dev/driver/goredis"
	"quorumlock.dev/internal/redistest"
)

func TestConformance(t *testing.T) {
	drivertest.Run(t, func(t *testing.T, addr string) driver.Conn { return goredis.Conn(redistest.Client(t, addr)) })
}

// TestConformanceAutoPipeliner: go-redis's experimental auto-pipelining
// client, one batched connection per master.
func TestConformanceAutoPipeliner(t *testing.T) {
	drivertest.Run(t, func(t *testing.T, addr string) driver.Conn {
		ap, err := redistest.Client(t, addr).AutoPipeline()
		require.NoError(t, err)
		t.Cleanup(func() { _ = ap.Close() })
		return goredis.Conn(ap)
	})
}

var _ goredis.Client = (*redis.AutoPipeliner)(nil)
