package redlock

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/internal/harness/critical"
	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
)

// BenchmarkContended: 8 goroutines of one client lock one resource over 5
// masters, hold it 1 ms and unlock, until b.N sections are done, with and
// without WithFairness. It reports sections_per_sec, wait_p99_us (Lock
// called to Lock returned), fairness (fewest sections of a goroutine over
// the most) and violations (sections that overlapped another, by an
// in-process holder count). push=off hides Subscribe from the masters, so
// waiters poll at the retry delay: the waiting of before issue 10, the
// baseline to compare with in the same run. clients=8 gives each goroutine
// a client of its own, as separate processes have: nothing passes
// in-process, every handoff goes through the masters.
func BenchmarkContended(b *testing.B) {
	servers := redistest.StartN(b, 5, redisserver.Options{})
	for _, v := range []struct {
		name                  string
		fair, push, perClient bool
	}{{"fair=on", true, true, false}, {"fair=off", false, true, false}, {"fair=off/push=off", false, false, false},
		{"fair=on/clients=8", true, true, true}, {"fair=off/clients=8", false, true, true}} {
		name := "masters=5/c=8/" + v.name
		var opts []Option
		if v.fair {
			opts = append(opts, WithFairness(defaultFairEntryTTL))
		}
		b.Run(name, func(b *testing.B) {
			masters := benchMasters(b, servers, 5)
			var sent atomic.Int64 // requests to the masters, subscription commands included
			for i, m := range masters {
				if v.push {
					masters[i] = requestCounter{countingConn{m.(full), &sent}}
				} else {
					masters[i] = plainMaster{requestCounter{countingConn{m.(full), &sent}}}
				}
			}
			const workers, hold, ttl = 8, time.Millisecond, 30 * time.Second
			clients := make([]*Client, workers)
			for k := range clients {
				if k == 0 || v.perClient {
					clients[k] = newTestClient(b, masters, opts...)
					b.Cleanup(func() { _ = clients[k].Close() })
				} else {
					clients[k] = clients[0]
				}
			}
			b.ReportAllocs()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			res := "bench:contended:" + name

			var (
				left       atomic.Int64 // sections still to start
				holding    atomic.Int32
				violations atomic.Int64
				mu         sync.Mutex
				waits      = make(latencies, 0, b.N+workers)
				counts     [workers]int
				errs       = make(chan error, workers)
				wg         sync.WaitGroup
			)
			left.Store(int64(b.N))
			b.ResetTimer()
			start := time.Now()
			for k := range workers {
				c := clients[k]
				wg.Go(func() {
					for left.Add(-1) >= 0 {
						t0 := time.Now()
						l, err := c.Lock(ctx, res, ttl)
						if err != nil {
							errs <- err
							return
						}
						wait := time.Since(t0)
						if holding.Add(1) != 1 {
							violations.Add(1)
						}
						critical.Hold(hold)
						holding.Add(-1)
						if err := l.Unlock(ctx); err != nil {
							errs <- err
							return
						}
						mu.Lock()
						waits = append(waits, wait)
						counts[k]++
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
			slices.Sort(waits)
			lo, hi := slices.Min(counts[:]), slices.Max(counts[:])
			b.ReportMetric(float64(len(waits))/elapsed.Seconds(), "sections_per_sec")
			b.ReportMetric(float64(waits[int(0.99*float64(len(waits)-1))].Microseconds()), "wait_p99_us")
			b.ReportMetric(float64(lo)/float64(max(hi, 1)), "fairness")
			b.ReportMetric(float64(violations.Load()), "violations")
			b.ReportMetric(float64(sent.Load())/float64(len(waits)), "requests/section")
		})
	}
}

// requestCounter is countingConn (the lock commands) that counts the
// requests of a master's subscription connection too (SUBSCRIBE,
// UNSUBSCRIBE, PING).
type requestCounter struct{ countingConn }

func (m requestCounter) Subscribe(ctx context.Context) driver.Subscription {
	return countingSubscription{m.full.Subscribe(ctx), m.n}
}

type countingSubscription struct {
	driver.Subscription
	n *atomic.Int64
}

func (s countingSubscription) Subscribe(ctx context.Context, channels ...string) error {
	s.n.Add(1)
	return s.Subscription.Subscribe(ctx, channels...)
}

func (s countingSubscription) Unsubscribe(ctx context.Context, channels ...string) error {
	s.n.Add(1)
	return s.Subscription.Unsubscribe(ctx, channels...)
}

func (s countingSubscription) Ping(ctx context.Context, payload string) error {
	s.n.Add(1)
	return s.Subscription.Ping(ctx, payload)
}
