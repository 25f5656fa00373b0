package allocjobs

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Cost is what the fence costs a job's calls to a store: the same calls, one at a time,
// without and with the fence.
type Cost struct {
	Samples int      `json:"samples"` // timed calls of each kind
	Claim   CostPair `json:"claim"`   // Begin: read whether the order shipped; guarded, after claiming the row
	Write   CostPair `json:"write"`   // Ship: take a unit and record the shipment; guarded, if the row's fence admits it
}

// CostPair is one call without and with the fence.
type CostPair struct {
	Unguarded Latency `json:"unguarded"`
	Guarded   Latency `json:"guarded"`
}

// Latency is how long one call took: percentiles in microseconds, and the calls per second
// of one caller.
type Latency struct {
	P50us     float64 `json:"p50_us"`
	P99us     float64 `json:"p99_us"`
	PerSecond float64 `json:"per_s"`
}

// MeasureCost sets store up afresh with skus SKUs and times n jobs' calls of each kind, one
// call at a time: Begin then Ship without a fence, and Begin then Ship with the fence
// (1, 2, 3...: always admitted, so nothing is refused), the two in turns, which goes first
// alternating. A tenth as many jobs run first, untimed. It leaves the store as the calls left it.
func MeasureCost(ctx context.Context, store Store, skus, n int) (Cost, error) {
	if skus < 1 || n < 1 {
		return Cost{}, fmt.Errorf("allocjobs: cost: %d SKUs, %d samples: want at least 1 of each", skus, n)
	}
	warm := max(10, n/10)
	if err := store.Setup(ctx, skus, 4*int64(warm+n)); err != nil {
		return Cost{}, err
	}
	var begins, ships [2][]time.Duration // unguarded, guarded
	for k := range 2 {
		begins[k] = make([]time.Duration, 0, n)
		ships[k] = make([]time.Duration, 0, n)
	}
	order := int64(0)
	job := func(i int, guarded bool) error {
		var f uint64
		k := 0
		if guarded {
			f, k = uint64(i+1), 1
		}
		sku := i % skus
		order++
		start := time.Now()
		if _, err := store.Begin(ctx, sku, order, f); err != nil {
			return fmt.Errorf("allocjobs: cost: begin: %w", err)
		}
		mid := time.Now()
		if err := store.Ship(ctx, sku, order, f); err != nil {
			return fmt.Errorf("allocjobs: cost: ship: %w", err)
		}
		if i >= warm {
			begins[k] = append(begins[k], mid.Sub(start))
			ships[k] = append(ships[k], time.Since(mid))
		}
		return nil
	}
	for i := range warm + n {
		first := i%2 == 0
		for _, guarded := range []bool{!first, first} {
			if err := job(i, guarded); err != nil {
				return Cost{}, err
			}
		}
	}
	return Cost{
		Samples: n,
		Claim:   CostPair{Unguarded: latency(begins[0]), Guarded: latency(begins[1])},
		Write:   CostPair{Unguarded: latency(ships[0]), Guarded: latency(ships[1])},
	}, nil
}

// latency summarizes ds, which it sorts.
func latency(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	var total time.Duration
	for _, d := range ds {
		total += d
	}
	at := func(q float64) float64 {
		i := int(q*float64(len(ds))+0.999999) - 1
		return float64(ds[max(0, min(i, len(ds)-1))].Nanoseconds()) / 1e3
	}
	return Latency{P50us: at(0.50), P99us: at(0.99), PerSecond: float64(len(ds)) / total.Seconds()}
}
