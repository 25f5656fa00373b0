package redlock

import (
	"context"
	"slices"
	"testing"
	"time"

	"quorumlock.dev/internal/harness/critical"
	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
)

// BenchmarkHandoff: two goroutines on one resource over 5 masters pass the
// lock back and forth; each iteration is one handoff, from the holder's
// Unlock returning to the waiter's Lock returning (handoff_p50_us,
// handoff_p99_us). The holder keeps the lock 1 ms so that the other is
// asleep in Lock when it is released; the TTL is long, so only a release
// can wake it in time. push=off hides Subscribe from the masters: the
// waiter then polls at the default retry delay.
func BenchmarkHandoff(b *testing.B) {
	servers := redistest.StartN(b, 5, redisserver.Options{})
	for _, push := range []bool{true, false} {
		name := "masters=5/push=on"
		if !push {
			name = "masters=5/push=off"
		}
		b.Run(name, func(b *testing.B) {
			masters := benchMasters(b, servers, 5)
			if !push {
				for i, m := range masters {
					masters[i] = plainMaster{m}
				}
			}
			c := newTestClient(b, masters)
			b.Cleanup(func() { _ = c.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			res := "bench:handoff:" + name
			const ttl, hold = 30 * time.Second, time.Millisecond

			handoffs := make(latencies, 0, b.N)
			released := make(chan time.Time, 1) // the holder's Unlock returned
			done := make(chan error, 2)
			quit := make(chan struct{})
			// may[k] lets side k call Lock: only once the other side holds
			// the lock, so that every Lock waits and every win is a handoff.
			may := [2]chan struct{}{make(chan struct{}, 1), make(chan struct{}, 1)}
			side := func(k int) {
				for {
					select {
					case <-may[k]:
					case <-quit:
						done <- nil
						return
					}
					l, err := c.Lock(ctx, res, ttl)
					if err != nil {
						done <- err
						return
					}
					// Only the holder touches handoffs: the sides take turns.
					handoffs = append(handoffs, time.Since(<-released))
					last := len(handoffs) == b.N
					if !last {
						may[1-k] <- struct{}{}
					}
					critical.Hold(hold)
					if err := l.Unlock(ctx); err != nil {
						done <- err
						return
					}
					if last {
						close(quit)
						done <- nil
						return
					}
					released <- time.Now()
				}
			}
			first, err := c.TryLock(ctx, res, ttl)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			go side(0)
			go side(1)
			may[0] <- struct{}{}
			critical.Hold(hold)
			if err := first.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
			released <- time.Now()
			for range 2 {
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			sorted := slices.Clone(handoffs)
			slices.Sort(sorted)
			at := func(p float64) float64 { return float64(sorted[int(p*float64(len(sorted)-1))].Nanoseconds()) / 1e3 }
			b.ReportMetric(at(0.50), "handoff_p50_us")
			b.ReportMetric(at(0.99), "handoff_p99_us")
		})
	}
}
