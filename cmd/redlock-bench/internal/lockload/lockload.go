// Package lockload measures a lock under load for redlock-bench choose: a goroutine per
// [Locker] takes and releases locks on random keys for a while, and [Measure] returns the
// attempts' latency percentiles (HdrHistogram) and the cycles per second. It knows no lock and
// starts no server: the caller's Lockers do.
package lockload

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Locker takes one lock at a time; held false means another holder had it.
type Locker interface {
	Acquire(ctx context.Context, key string, ttl time.Duration) (release func(context.Context) error, held bool, err error)
	Close()
}

// Load is what [Measure] runs.
type Load struct {
	Duration time.Duration // measuring time
	TTL      time.Duration // each lock's lease
	Prefix   string        // keys are Prefix followed by 0 to Keys-1
	Keys     int
}

// Result is one measurement. Latencies are in microseconds, over every acquire attempt.
type Result struct {
	Attempts     int64
	Cycles       int64 // acquired and released
	Contended    int64 // refused: another goroutine held the resource
	Errors       int64 // failed attempts or releases, counted, not fatal
	P50Us        float64
	P90Us        float64
	P99Us        float64
	P999Us       float64
	CyclesPerSec float64
}

// Measure runs a goroutine per locker, each taking and releasing locks on random keys for
// load.Duration. Failed calls are counted; a measurement without a single cycle is an error.
func Measure(ctx context.Context, lockers []Locker, load Load) (Result, error) {
	var (
		mu       sync.Mutex
		hist     = hdrhistogram.New(1, 600_000_000, 3)
		res      Result
		errs     atomic.Int64
		firstErr error
		wg       sync.WaitGroup
	)
	// A lock call stuck past the row's end is cut off, not waited for.
	runCtx, cancel := context.WithTimeout(ctx, load.Duration+10*time.Second)
	defer cancel()
	start := time.Now()
	end := start.Add(load.Duration)
	for _, l := range lockers {
		wg.Go(func() {
			local := hdrhistogram.New(1, 600_000_000, 3)
			var attempts, cycles, contended int64
			for time.Now().Before(end) && runCtx.Err() == nil {
				key := fmt.Sprintf("%s%d", load.Prefix, rand.IntN(load.Keys))
				t0 := time.Now()
				release, held, err := l.Acquire(runCtx, key, load.TTL)
				_ = local.RecordValue(max(time.Since(t0).Microseconds(), 1))
				attempts++
				if err == nil && held {
					err = release(runCtx)
					if err == nil {
						cycles++
					}
				} else if err == nil {
					contended++
				}
				if err != nil && runCtx.Err() == nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					errs.Add(1)
				}
			}
			mu.Lock()
			hist.Merge(local)
			res.Attempts += attempts
			res.Cycles += cycles
			res.Contended += contended
			mu.Unlock()
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	if err := ctx.Err(); err != nil {
		return res, err
	}
	res.Errors = errs.Load()
	if res.Cycles == 0 {
		return res, fmt.Errorf("c=%d: no lock taken and released in %d attempts; first error: %v", len(lockers), res.Attempts, firstErr)
	}
	res.P50Us = float64(hist.ValueAtQuantile(50))
	res.P90Us = float64(hist.ValueAtQuantile(90))
	res.P99Us = float64(hist.ValueAtQuantile(99))
	res.P999Us = float64(hist.ValueAtQuantile(99.9))
	res.CyclesPerSec = float64(res.Cycles) / secs
	return res, nil
}
