package redlock

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
	"quorumlock.dev/quorum"

	"quorumlock.dev/driver/goredis"
	"quorumlock.dev/redlock/internal/fair"
)

// Benchmarks on real redis-server processes started on loopback ports.
// Each sub-benchmark reports, besides ns/op (one acquire plus one release),
// the acquire latency percentiles in µs, so the figures in
// docs/benchmarks.md come from here: make gobench.

var (
	sinkLock *Lock
	sinkErr  error
)

func benchMasters(b *testing.B, servers []*redisserver.Server, n int) []Master {
	masters := make([]Master, n)
	for i := range n {
		masters[i] = goredis.Conn(redistest.Client(b, servers[i].Addr()))
	}
	return masters
}

// latencies records one duration per iteration without allocating in the
// timed loop, and reports percentiles.
type latencies []time.Duration

func (l latencies) report(b *testing.B, prefix string) {
	if len(l) == 0 {
		return
	}
	s := slices.Clone(l)
	slices.Sort(s)
	at := func(p float64) float64 { return float64(s[int(p*float64(len(s)-1))].Nanoseconds()) / 1e3 }
	b.ReportMetric(at(0.50), prefix+"p50-µs")
	b.ReportMetric(at(0.99), prefix+"p99-µs")
}

// BenchmarkLockUnlock: one goroutine, TryLock then Unlock, on 1, 3, 5 and 7
// masters; beside each, the raw go-redis quorum loop (rawCycle) on the same
// servers, so that -count runs alternate the two and machine drift hits
// both.
func BenchmarkLockUnlock(b *testing.B) {
	servers := redistest.StartN(b, 7, redisserver.Options{})
	for _, n := range []int{1, 3, 5, 7} {
		b.Run(fmt.Sprintf("masters=%d/impl=quorumlock", n), func(b *testing.B) {
			c := newTestClient(b, benchMasters(b, servers, n))
			ctx := context.Background()
			// Unlock returns at a majority and releases the rest in the
			// background: rotating over resources keeps the next TryLock from
			// meeting those keys (the raw loop waits for every release).
			resources := make([]string, 64)
			for i := range resources {
				resources[i] = fmt.Sprintf("bench:%d:%d", n, i)
			}
			acquire := make(latencies, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				start := time.Now()
				l, err := c.TryLock(ctx, resources[i%len(resources)], 10*time.Second)
				acquire = append(acquire, time.Since(start))
				if err != nil {
					b.Fatal(err)
				}
				sinkErr = l.Unlock(ctx)
				sinkLock = l
			}
			b.StopTimer()
			acquire.report(b, "acquire-")
		})
		b.Run(fmt.Sprintf("masters=%d/impl=raw", n), func(b *testing.B) {
			rawCycle(b, servers[:n])
		})
	}
}

// BenchmarkLockUnlockParallel: GOMAXPROCS×4 goroutines share one client,
// each on its own resource.
func BenchmarkLockUnlockParallel(b *testing.B) {
	servers := redistest.StartN(b, 5, redisserver.Options{})
	for _, n := range []int{1, 5} {
		b.Run(fmt.Sprintf("masters=%d", n), func(b *testing.B) {
			c := newTestClient(b, benchMasters(b, servers, n))
			ctx := context.Background()
			var id sync.Mutex
			next := 0
			b.ReportAllocs()
			b.SetParallelism(4)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				id.Lock()
				next++
				// Rotated, as in BenchmarkLockUnlock: Unlock returns before
				// the last masters are released.
				var resources [16]string
				for i := range resources {
					resources[i] = fmt.Sprintf("bench:parallel:%d:%d", next, i)
				}
				id.Unlock()
				for i := 0; pb.Next(); i++ {
					l, err := c.TryLock(ctx, resources[i%len(resources)], 10*time.Second)
					if err != nil {
						b.Error(err)
						return
					}
					if err := l.Unlock(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// rawCycle is the baseline: the least a Redlock client must do with
// go-redis. SET NX PX on every master in parallel, return at a majority;
// release with the compare-and-delete script on every master, waiting for
// all. No validity, no cleanup of late SETs, no error detail.
// rawRelease is release.lua for the raw loop's plain go-redis clients.
var rawRelease = redis.NewScript(fair.QueueLua + releaseLua)

func rawCycle(b *testing.B, servers []*redisserver.Server) {
	n := len(servers)
	clients := make([]*redis.Client, n)
	for i := range n {
		clients[i] = redistest.Client(b, servers[i].Addr())
	}
	ctx := context.Background()
	key := fmt.Sprintf("lock:bench:raw:%d", n)
	keys := []string{key}
	need := quorum.Majority(n)
	acquire := make(latencies, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		token := (&Client{}).newToken()
		start := time.Now()
		oks := make(chan bool, n)
		for _, c := range clients {
			go func() { oks <- c.SetNX(ctx, key, token, 10*time.Second).Val() }()
		}
		won := 0
		for range n {
			if <-oks {
				won++
				if won == need {
					break
				}
			}
		}
		acquire = append(acquire, time.Since(start))
		if won < need {
			b.Fatalf("raw quorum lost: %d of %d", won, n)
		}
		var wg sync.WaitGroup
		for _, c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rawRelease.Run(ctx, c, keys, token)
			}()
		}
		wg.Wait()
	}
	b.StopTimer()
	acquire.report(b, "acquire-")
}
