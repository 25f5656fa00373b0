package clockdrift

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// walk reads a node every step for n samples: from sample i on its clock
// runs at 1+rate(i), jump(i) is added at sample i, and each reading is off
// by ±noise, alternating.
func walk(n int, step time.Duration, rate func(i int) float64, jump func(i int) time.Duration, noise time.Duration) []Sample {
	out := make([]Sample, n)
	remote := time.Unix(1_700_000_000, 0)
	for i := range out {
		if i > 0 {
			remote = remote.Add(time.Duration(float64(step) * (1 + rate(i))))
		}
		remote = remote.Add(jump(i))
		e := noise
		if i%2 == 1 {
			e = -noise
		}
		out[i] = Sample{Local: 3*time.Second + time.Duration(i)*step, Remote: remote.Add(e), RTT: 200 * time.Microsecond}
	}
	return out
}

func constRate(r float64) func(int) float64 { return func(int) float64 { return r } }

func rateFrom(at int, r float64) func(int) float64 {
	return func(i int) float64 {
		if i >= at {
			return r
		}
		return 0
	}
}

func noJump(int) time.Duration { return 0 }

func jumpAt(at int, by time.Duration) func(int) time.Duration {
	return func(i int) time.Duration {
		if i == at {
			return by
		}
		return 0
	}
}

func TestTracker(t *testing.T) {
	const step = 100 * time.Millisecond
	for _, tc := range []struct {
		name     string
		in       []Sample
		steps    []int // samples that stepped
		jumps    []int // samples whose step was a jump (reported at the next one)
		jumpBy   time.Duration
		rate     float64 // the last reading's
		settling []int   // samples that read Settling
	}{
		{name: "steady, with reading noise", in: walk(60, step, constRate(0), noJump, 80*time.Microsecond), rate: 0},
		{name: "1% fast, steady", in: walk(60, step, constRate(0.01), noJump, 0), rate: 0.01},
		{name: "a jump forward", in: walk(60, step, constRate(0), jumpAt(20, time.Second), 50*time.Microsecond),
			steps: []int{20}, jumps: []int{21}, jumpBy: time.Second, rate: 0},
		{name: "a jump back", in: walk(60, step, constRate(0), jumpAt(20, -2*time.Second), 0),
			steps: []int{20}, jumps: []int{21}, jumpBy: -2 * time.Second, rate: 0},
		{name: "a jump on a 1% fast clock", in: walk(60, step, constRate(0.01), jumpAt(30, 500*time.Millisecond), 0),
			steps: []int{30}, jumps: []int{31}, jumpBy: 500 * time.Millisecond, rate: 0.01},
		// A change of rate steps once, is not a jump, and is measured from
		// the samples after it, a second of them.
		{name: "runs half as fast again from sample 20", in: walk(60, step, rateFrom(20, 0.5), noJump, 0),
			steps: []int{20}, rate: 0.5, settling: span(21, 29)},
		{name: "stands still from sample 20", in: walk(60, step, rateFrom(20, -1), noJump, 0),
			steps: []int{20}, rate: -1, settling: span(21, 29)},
		{name: "half as fast again from the start", in: walk(40, step, constRate(0.5), noJump, 0),
			steps: []int{1}, rate: 0.5, settling: span(2, 10)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTracker(32, time.Millisecond)
			var steps, jumps, settling []int
			var last Reading
			for i, s := range tc.in {
				last = tr.Add(s)
				if last.Step != 0 {
					steps = append(steps, i)
				}
				if last.Jumped {
					jumps = append(jumps, i)
					assert.Equal(t, tc.in[i-1].Local, last.Jump.At)
					assert.InDelta(t, float64(tc.jumpBy), float64(last.Jump.By), float64(time.Millisecond))
				}
				if last.Settling {
					settling = append(settling, i)
				}
				assert.LessOrEqual(t, len(tr.seg), 32, "the window is bounded")
			}
			assert.Equal(t, tc.steps, steps, "steps")
			assert.Equal(t, tc.jumps, jumps, "jumps")
			assert.Equal(t, tc.settling, settling, "settling")
			require.True(t, last.RateOK)
			assert.InDelta(t, tc.rate, last.Rate, 1e-3)
			assert.InDelta(t, tc.rate, last.Rate, last.RateErr, "the error bound holds")
		})
	}
}

func span(a, b int) []int {
	var out []int
	for i := a; i <= b; i++ {
		out = append(out, i)
	}
	return out
}

func TestTrackerIgnoresStaleSamples(t *testing.T) {
	tr := NewTracker(8, time.Millisecond)
	s := walk(20, 100*time.Millisecond, constRate(0), noJump, 0)
	for _, x := range s[:12] {
		tr.Add(x)
	}
	back := s[5]
	back.Remote = back.Remote.Add(time.Hour) // would be a jump, were it used
	r := tr.Add(back)
	assert.Zero(t, r.Step)
	assert.Len(t, tr.seg, 8)
	assert.Equal(t, s[11], tr.seg[7])
	assert.Zero(t, tr.Add(s[12]).Step)
}

func TestRateError(t *testing.T) {
	assert.True(t, math.IsInf(RateError(nil), 1))
	assert.True(t, math.IsInf(RateError(walk(1, time.Second, constRate(0), noJump, 0)), 1))
	same := walk(3, time.Second, constRate(0), noJump, 0)
	for i := range same {
		same[i].Local = same[0].Local
	}
	assert.True(t, math.IsInf(RateError(same), 1))

	// The bound is the worst case: readings off by half their round trip,
	// early before the mean and late after it, move Rate by that much.
	for _, rtt := range []time.Duration{0, 200 * time.Microsecond, 20 * time.Millisecond} {
		s := walk(21, 100*time.Millisecond, constRate(0.003), noJump, 0)
		var mean time.Duration
		for i := range s {
			s[i].RTT = rtt
			mean += s[i].Local / time.Duration(len(s))
		}
		bound := RateError(s)
		e := rtt/2 + timeResolution
		worst := make([]Sample, len(s))
		for i, x := range s {
			switch {
			case x.Local < mean:
				x.Local += e // read later than it was: the offset looks smaller
			case x.Local > mean:
				x.Local -= e
			}
			worst[i] = x
		}
		clean, ok := Rate(s)
		require.True(t, ok)
		moved, ok := Rate(worst)
		require.True(t, ok)
		assert.InDelta(t, bound, math.Abs(moved-clean), bound*0.05+1e-9, "rtt %v", rtt)
	}
}

// A slow reply whose reading sits at the edge of its round trip barely
// tilts the estimate, where an unweighted fit would move by a percent.
func TestRateWeighsRoundTrips(t *testing.T) {
	s := walk(32, 100*time.Millisecond, constRate(0), noJump, 0)
	for _, i := range []int{27, 28, 29} {
		s[i].RTT = 100 * time.Millisecond
		s[i].Remote = s[i].Remote.Add(45 * time.Millisecond)
	}
	rate, ok := Rate(s)
	require.True(t, ok)
	assert.InDelta(t, 0, rate, 1e-4)
	assert.InDelta(t, 0, rate, RateError(s))
	unweighted := slices.Clone(s)
	for i := range unweighted {
		unweighted[i].RTT = 0
	}
	tilted, ok := Rate(unweighted)
	require.True(t, ok)
	assert.Greater(t, tilted, 0.005, "the case would tilt an unweighted fit")
}
