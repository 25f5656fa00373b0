// Package clockdrift holds the time arithmetic of a lease: how much of a
// lock's TTL a client may still count on after the time it took to win the
// lock, less an allowance for the clocks of the nodes running at another
// rate than the client's; and the estimates of a node's clock rate and
// jumps from readings of its TIME (Rate, RateError, Jumps, and Tracker,
// which follows one node sample by sample), for a monitor to compare with
// that allowance. The code is pure and never panics; it does not read any
// clock itself.
//
// The allowance covers a bounded difference in clock rate, not a clock that
// jumps: a node whose wall clock is stepped forward expires keys early, and
// no allowance protects against that (see the redlock package).
package clockdrift

import (
	"math"
	"time"
)

// Allowance is the drift term factor·ttl + constant, rounded up to the next
// nanosecond and never negative. A negative or NaN factor and a negative
// constant count as zero; a term too large for a Duration saturates.
func Allowance(ttl time.Duration, factor float64, constant time.Duration) time.Duration {
	if !(factor > 0) || ttl <= 0 {
		factor = 0
	}
	if constant < 0 {
		constant = 0
	}
	scaled := math.Ceil(float64(ttl) * factor)
	if scaled >= math.MaxInt64 {
		return math.MaxInt64
	}
	return addSat(time.Duration(scaled), constant)
}

// Validity is what is left of a lease of ttl after elapsed:
// ttl − elapsed − Allowance(ttl, factor, constant). A negative elapsed counts
// as zero, so the result is never above ttl, and it never grows with
// elapsed. It saturates instead of overflowing. A result of zero or less
// means the lease gives no time at all.
//
// Worked example: ttl 10 s, elapsed 120 ms, factor 0.01, constant 2 ms gives
// 10,000 − 120 − (100 + 2) = 9,778 ms.
func Validity(ttl, elapsed time.Duration, factor float64, constant time.Duration) time.Duration {
	if elapsed < 0 {
		elapsed = 0
	}
	return subSat(subSat(ttl, elapsed), Allowance(ttl, factor, constant))
}

// addSat adds two non-negative durations, saturating at the maximum.
func addSat(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// subSat returns a − b for b ≥ 0, saturating at the minimum.
func subSat(a, b time.Duration) time.Duration {
	if a < math.MinInt64+b {
		return math.MinInt64
	}
	return a - b
}
