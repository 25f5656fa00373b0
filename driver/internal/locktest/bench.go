package locktest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/driver/drivertest"
	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
	"quorumlock.dev/redlock"
)

// Bench measures the lock through the adapter on five redis-server
// masters: TryLock and Unlock of a fresh resource per cycle, by one
// goroutine (c=1) and by 64 (c=64), the lock's defaults (a 50 ms node
// timeout). Besides ns/op (one cycle; at c=64 the machine's cycles in
// parallel) it reports the cycle's latency percentiles and failed/op: the
// share of TryLocks that did not win, which on fresh resources means that
// calls queued in the client past the node timeout.
func Bench(b *testing.B, newConn drivertest.NewConn) {
	servers := redistest.StartN(b, 5, redisserver.Options{})
	for _, c := range []int{1, 64} {
		b.Run("c="+strconv.Itoa(c), func(b *testing.B) {
			masters := make([]driver.Conn, len(servers))
			for i, s := range servers {
				masters[i] = newConn(b, s.Addr())
			}
			client, err := redlock.New(masters)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = client.Close() })
			var n atomic.Int64
			var failed atomic.Int64
			var mu sync.Mutex
			var lat []time.Duration
			cycle := func(own *[]time.Duration) {
				ctx := context.Background()
				start := time.Now()
				l, err := client.TryLock(ctx, fmt.Sprintf("bench:%d", n.Add(1)), 10*time.Second)
				if err == nil {
					err = l.Unlock(ctx)
				}
				*own = append(*own, time.Since(start))
				if err != nil {
					failed.Add(1)
					if !errors.Is(err, redlock.ErrQuorumUnavailable) && !errors.Is(err, redlock.ErrNotAcquired) {
						b.Error(err)
					}
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			if c == 1 {
				own := make([]time.Duration, 0, b.N)
				for range b.N {
					cycle(&own)
				}
				lat = own
			} else {
				b.SetParallelism(max(1, c/runtime.GOMAXPROCS(0)))
				b.RunParallel(func(pb *testing.PB) {
					var own []time.Duration
					for pb.Next() {
						cycle(&own)
					}
					mu.Lock()
					lat = append(lat, own...)
					mu.Unlock()
				})
			}
			b.StopTimer()
			slices.Sort(lat)
			if len(lat) > 0 {
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			}
			b.ReportMetric(float64(failed.Load())/float64(b.N), "failed/op")
		})
	}
}
