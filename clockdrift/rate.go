package clockdrift

import (
	"math"
	"time"
)

// Sample is one reading of a node's wall clock (its TIME reply) against
// the local monotonic clock, taken at the middle of the request's round
// trip; RTT bounds how far the two readings can be apart.
type Sample struct {
	Local  time.Duration // the local monotonic clock, from any fixed origin
	Remote time.Time     // what the node said
	RTT    time.Duration
}

// offsetFrom is how much further the node's clock moved than ours from
// sample o to s, in nanoseconds; the differences are taken in integers so
// that a wall clock in the 2020s keeps its nanoseconds.
func (s Sample) offsetFrom(o Sample) float64 {
	return float64(s.Remote.Sub(o.Remote) - (s.Local - o.Local))
}

// Rate estimates how fast the node's clock runs against ours, as the
// least-squares slope of its offset over local time, each sample weighted
// by its round trip (a sample twice as uncertain counts a quarter as much,
// so that a slow reply cannot tilt the estimate): 0.01 means 1% fast,
// -0.01 1% slow. Samples must be in local-time order; ok is false with
// fewer than 3 or less than a second between the first and the last. A
// jump (see [Jumps]) inside the window skews the slope: estimate over the
// samples after it.
func Rate(samples []Sample) (rate float64, ok bool) {
	if len(samples) < 3 || samples[len(samples)-1].Local-samples[0].Local < time.Second {
		return 0, false
	}
	return slope(samples)
}

// Jump is a step of a node's clock between two samples.
type Jump struct {
	At time.Duration // the local time of the later sample
	By time.Duration // how far the node's clock moved beyond ours: > 0 forward
}

// Jumps lists the steps between consecutive samples whose offset changed
// by more than tolerance plus the two samples' round trips, after taking
// out the change that rate (from [Rate], or 0) explains. Samples must be in
// local-time order.
func Jumps(samples []Sample, rate float64, tolerance time.Duration) []Jump {
	var out []Jump
	for i := 1; i < len(samples); i++ {
		a, b := samples[i-1], samples[i]
		if stepped(a, b, rate, tolerance) {
			out = append(out, Jump{At: b.Local, By: time.Duration(stepOf(a, b, rate))})
		}
	}
	return out
}

// Exceeds reports whether a measured rate is beyond what a lease's drift
// allowance covers: |rate| > factor.
func Exceeds(rate, factor float64) bool { return math.Abs(rate) > factor }

// Beyond reports whether a rate known to within rateErr (see [RateError])
// exceeds factor whatever the error hid: |rate| − rateErr > factor.
func Beyond(rate, rateErr, factor float64) bool { return math.Abs(rate)-rateErr > factor }
