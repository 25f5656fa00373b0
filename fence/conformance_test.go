package fence_test

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"testing"

	"github.com/alicebob/miniredis/v2"

	"quorumlock.dev/driver"
	"quorumlock.dev/driver/goredis"
	"quorumlock.dev/fence"
	"quorumlock.dev/fence/fencetest"
	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
)

// TestConformance runs the guards' conformance kit on RedisGuard, on miniredis and on a real
// redis-server. Not parallel: the kit counts fence.Rejected.
func TestConformance(t *testing.T) {
	mini := miniredis.RunT(t)
	real := redistest.Start(t, redisserver.Options{})
	for name, addr := range map[string]string{"miniredis": mini.Addr(), "redis-server": real.Addr()} {
		t.Run(name, func(t *testing.T) {
			fencetest.Run(t, func(t *testing.T, compare fence.Comparison) fencetest.Store {
				return newRedisStore(t, addr, compare)
			})
		})
	}
}

// redisStore is RedisGuard as the kit sees it: record id is the key fencetest:<n>:<id>, a hash
// written by the guard only. A record without a fence is a key that does not exist yet, which
// Get reads as ("", 0) and the guard admits any fence on.
type redisStore struct {
	addr   string
	node   driver.Conn
	prefix string
	guard  fence.RedisGuard
}

var redisStores atomic.Int64

func newRedisStore(t *testing.T, addr string, compare fence.Comparison) *redisStore {
	return &redisStore{
		addr:   addr,
		node:   goredis.Conn(redistest.Client(t, addr)),
		prefix: fmt.Sprintf("fencetest:%d:", redisStores.Add(1)),
		guard:  fence.RedisGuard{Compare: compare},
	}
}

func (s *redisStore) Insert(context.Context, string) error { return nil }

func (s *redisStore) Write(ctx context.Context, id, value string, f uint64) error {
	return s.guard.Set(ctx, s.node, s.prefix+id, value, f, 0)
}

func (s *redisStore) Read(ctx context.Context, id string) (string, uint64, error) {
	return s.guard.Get(ctx, s.node, s.prefix+id)
}

func (s *redisStore) Process(t *testing.T) fencetest.Store {
	other := *s
	other.node = goredis.Conn(redistest.Client(t, s.addr))
	return &other
}

// MaxFence: the guard compares fences as decimal strings, exact for every uint64.
func (s *redisStore) MaxFence() uint64 { return math.MaxUint64 }
