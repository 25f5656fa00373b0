package clockdrift

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// clockSamples reads a node whose clock runs at 1+rate against ours, every
// step for n samples, with a jump of by at sample jumpAt (-1: none) and a
// reading error that alternates ±noise.
func clockSamples(n int, step time.Duration, rate float64, jumpAt int, by, noise time.Duration) []Sample {
	t0 := time.Unix(1_700_000_000, 0)
	out := make([]Sample, n)
	var jumped time.Duration
	for i := range out {
		local := time.Duration(i) * step
		if i == jumpAt {
			jumped = by
		}
		e := noise
		if i%2 == 1 {
			e = -noise
		}
		remote := t0.Add(time.Duration(float64(local)*(1+rate)) + jumped + e)
		out[i] = Sample{Local: local + 5*time.Second, Remote: remote, RTT: 200 * time.Microsecond}
	}
	return out
}

func TestRate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		in    []Sample
		want  float64
		delta float64
		ok    bool
	}{
		{"same rate", clockSamples(20, 500*time.Millisecond, 0, -1, 0, 0), 0, 1e-9, true},
		{"2% fast", clockSamples(20, 500*time.Millisecond, 0.02, -1, 0, 0), 0.02, 1e-9, true},
		{"1% slow", clockSamples(20, 500*time.Millisecond, -0.01, -1, 0, 0), -0.01, 1e-9, true},
		{"noise of 100 µs over 10 s", clockSamples(21, 500*time.Millisecond, 0.005, -1, 0, 100*time.Microsecond), 0.005, 2e-5, true},
		{"two samples", clockSamples(2, time.Second, 0.02, -1, 0, 0), 0, 0, false},
		{"under a second", clockSamples(10, 50*time.Millisecond, 0.02, -1, 0, 0), 0, 0, false},
		{"nothing", nil, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Rate(tc.in)
			require.Equal(t, tc.ok, ok)
			if ok {
				assert.InDelta(t, tc.want, got, tc.delta)
			}
		})
	}
}

func TestJumps(t *testing.T) {
	tol := time.Millisecond
	// A 10 s forward step at sample 7: one jump, of 10 s, at that sample.
	s := clockSamples(15, time.Second, 0, 7, 10*time.Second, 0)
	j := Jumps(s, 0, tol)
	require.Len(t, j, 1)
	assert.Equal(t, s[7].Local, j[0].At)
	assert.InDelta(t, float64(10*time.Second), float64(j[0].By), float64(time.Microsecond))

	// A step back is a jump too, with a negative By.
	j = Jumps(clockSamples(15, time.Second, 0, 3, -2*time.Second, 0), 0, tol)
	require.Len(t, j, 1)
	assert.Less(t, j[0].By, time.Duration(0))

	// A steady 2% fast clock steps 20 ms a second: a jump unless the rate
	// is taken out.
	fast := clockSamples(15, time.Second, 0.02, -1, 0, 0)
	assert.Len(t, Jumps(fast, 0, tol), 14)
	rate, ok := Rate(fast)
	require.True(t, ok)
	assert.Empty(t, Jumps(fast, rate, tol))

	// Reading noise within the round trips is not a jump.
	assert.Empty(t, Jumps(clockSamples(15, time.Second, 0, -1, 0, 150*time.Microsecond), 0, tol))
}

func TestExceeds(t *testing.T) {
	assert.False(t, Exceeds(0.005, 0.01))
	assert.True(t, Exceeds(0.02, 0.01))
	assert.True(t, Exceeds(-0.02, 0.01))
	assert.False(t, Exceeds(0.01, 0.01), "at the allowance is covered")
}

func TestBeyond(t *testing.T) {
	for _, tc := range []struct {
		rate, err, factor float64
		want              bool
	}{
		{0.5, 0.001, 0.01, true},
		{-0.5, 0.001, 0.01, true},
		{0.015, 0.01, 0.01, false}, // could be 0.005
		{0.021, 0.01, 0.01, true},
		{0, 0.5, 0.01, false},
		{0.02, math.Inf(1), 0.01, false},
		{math.NaN(), 0, 0.01, false},
	} {
		assert.Equal(t, tc.want, Beyond(tc.rate, tc.err, tc.factor), "%+v", tc)
	}
}
