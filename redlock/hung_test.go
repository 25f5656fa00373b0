package redlock

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"

	"quorumlock.dev/driver/goredis"
)

// hungLoad is the outcome of runHungLoad.
type hungLoad struct {
	attempts, acquired int64
	peak, after        int // goroutines: the most seen during the load, and one second after it
	baseline           int // goroutines before the load
	p50, p99           time.Duration
	poolSize           int
	duration           time.Duration
}

// runHungLoad is the scenario of a hung master under load: five real
// masters, hung of them stopped with SIGSTOP, go-redis clients with library
// defaults (ReadTimeout 3 s, pool of 10 per CPU), workers goroutines doing
// TryLock and Unlock on fresh resources for d. It samples the process's
// goroutines during the load and one second after it stopped.
func runHungLoad(tb testing.TB, hung, workers int, d time.Duration) hungLoad {
	tb.Helper()
	servers := redistest.StartN(tb, 5, redisserver.Options{})
	masters := make([]Master, len(servers))
	var pool int
	for i, s := range servers {
		cl := redis.NewClient(&redis.Options{Addr: s.Addr()}) // library defaults, as users have them
		tb.Cleanup(func() { _ = cl.Close() })
		// Connect first: the stopped servers then hold live pooled connections,
		// as in production, and new dials do not fail either (the kernel accepts).
		require.NoError(tb, cl.Ping(context.Background()).Err())
		masters[i] = goredis.Conn(cl)
		pool = cl.Options().PoolSize
	}
	c, err := New(masters)
	require.NoError(tb, err)
	for _, s := range servers[:hung] {
		require.NoError(tb, s.Pause())
		tb.Cleanup(func() { _ = s.Resume() })
	}

	out := hungLoad{baseline: runtime.NumGoroutine(), poolSize: pool, duration: d}
	var peak atomic.Int64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			if n := int64(runtime.NumGoroutine()); n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-tick.C:
			case <-stopSampling:
				return
			}
		}
	}()

	ctx := context.Background()
	end := time.Now().Add(d)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		lat      []time.Duration
		attempts atomic.Int64
		acquired atomic.Int64
		seq      atomic.Int64
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for time.Now().Before(end) {
				res := fmt.Sprintf("hung:%s:%d", tb.Name(), seq.Add(1))
				start := time.Now()
				l, err := c.TryLock(ctx, res, 10*time.Second)
				mine = append(mine, time.Since(start))
				attempts.Add(1)
				if err != nil {
					continue
				}
				acquired.Add(1)
				_ = l.Unlock(ctx)
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(stopSampling)
	<-sampled
	time.Sleep(time.Second)
	out.after = runtime.NumGoroutine()
	out.peak = max(int(peak.Load()), out.after)
	out.attempts, out.acquired = attempts.Load(), acquired.Load()
	slices.Sort(lat)
	if len(lat) > 0 {
		out.p50, out.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
	}
	return out
}

// TestHungMastersBounded: two of five masters stopped, sixteen goroutines
// locking and unlocking for 1.5 s. What the hung masters hold is capped:
// one second after the load, the goroutines left are those stuck in reads
// of the two hung servers' pooled connections (at most a pool each), the
// client's idle call goroutines and a few more, whatever the attempt rate. Every attempt still wins, on the
// three healthy masters.
func TestHungMastersBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("a load run: skipped with -short")
	}
	r := runHungLoad(t, 2, 16, 1500*time.Millisecond)
	t.Logf("attempts %d, acquired %d, goroutines: before %d, peak %d, 1 s after %d (pool %d); acquire p50 %v p99 %v",
		r.attempts, r.acquired, r.baseline, r.peak, r.after, r.poolSize, r.p50, r.p99)
	require.Positive(t, r.attempts)
	// Three healthy masters of five grant the locks; a few attempts may miss
	// the node timeout on a loaded machine (the race detector's slowdown).
	assert.GreaterOrEqual(t, r.acquired, r.attempts*95/100, "attempts that won")
	// Beside them wait the client's idle call goroutines (quorum.Pool, at
	// most idlePerMaster per master), a number that no load raises.
	assert.LessOrEqual(t, r.after-r.baseline, 2*r.poolSize+16+idlePerMaster*5, "goroutines left behind the hung masters")
	// The peak adds, per hung master, the calls of one node timeout and
	// their releases (each gone within the node timeout) while the breaker
	// has not taken it out: proportional to the attempt rate, not to the
	// attempts. The rate is not even over the run (attempts are slower while
	// the hung masters are still called), hence twice the average here.
	perTimeout := int(r.attempts * int64(defaultNodeTimeout) / int64(r.duration))
	assert.LessOrEqual(t, r.peak-r.baseline, 2*r.poolSize+2*2*2*perTimeout+16, "goroutines at the peak")
}

// BenchmarkHungMasters is the hung-master scenario of TestHungMastersBounded
// as figures for docs/benchmarks.md, beside the same load on five healthy
// masters: the goroutines at the peak and one second after the load, the
// attempts per second and the acquire percentiles. One scenario of 1.5 s is
// one op: run it with -benchtime 1x.
func BenchmarkHungMasters(b *testing.B) {
	for _, hung := range []int{0, 2} {
		b.Run(fmt.Sprintf("hung=%d", hung), func(b *testing.B) {
			for range b.N {
				r := runHungLoad(b, hung, 16, 1500*time.Millisecond)
				b.ReportMetric(float64(r.peak-r.baseline), "peak-goroutines")
				b.ReportMetric(float64(r.after-r.baseline), "goroutines-after-1s")
				b.ReportMetric(float64(r.attempts)/r.duration.Seconds(), "attempts/s")
				b.ReportMetric(float64(r.acquired)/float64(max(r.attempts, 1)), "won/attempt")
				b.ReportMetric(float64(r.p50.Microseconds()), "acquire-p50-µs")
				b.ReportMetric(float64(r.p99.Microseconds()), "acquire-p99-µs")
			}
		})
	}
}
