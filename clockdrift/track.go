package clockdrift

import (
	"math"
	"time"
)

// timeResolution is how finely a TIME reply reads the node's clock.
const timeResolution = time.Microsecond

// RateError bounds how far [Rate]'s estimate can be from the true rate when
// each sample's local reading is off by at most its error e (half its
// round trip plus TIME's microsecond): the worst case of the weighted
// least-squares slope, Σ wᵢ·eᵢ·|xᵢ−x̄| / Σ wᵢ·(xᵢ−x̄)², with wᵢ = 1/eᵢ². It is
// +Inf with fewer than 2 samples or none apart in time.
func RateError(samples []Sample) float64 {
	if len(samples) < 2 {
		return math.Inf(1)
	}
	first := samples[0]
	var sw, swx float64
	for _, s := range samples {
		w := s.weight()
		sw, swx = sw+w, swx+w*float64(s.Local-first.Local)
	}
	mean := swx / sw
	var num, den float64
	for _, s := range samples {
		w, d := s.weight(), float64(s.Local-first.Local)-mean
		num += w * float64(s.err()) * math.Abs(d)
		den += w * d * d
	}
	if den == 0 {
		return math.Inf(1)
	}
	return num / den
}

// err bounds how far the sample's local reading is from the moment the
// node read its clock: the node read it during the round trip, and Local
// is the round trip's middle.
func (s Sample) err() time.Duration { return max(s.RTT, 0)/2 + timeResolution }

// weight is the sample's weight in the rate's fit: a sample known to
// within e counts as 1/e².
func (s Sample) weight() float64 {
	e := float64(s.err())
	return 1 / (e * e)
}

// Tracker follows one node's clock sample by sample. It keeps the samples
// since the last step, at most window of them, and estimates the rate over
// those. A step is an offset change between two samples beyond tolerance
// plus their round trips, after taking out the rate: either a jump or a
// change of rate, told apart by the next sample (a jump: the clock goes on
// at its old rate). Use [NewTracker]; a Tracker is not safe for concurrent
// use.
type Tracker struct {
	window    int
	tolerance time.Duration
	seg       []Sample
	carried   float64 // predicts the next step while seg is too short for Rate
	fit       bool    // seg began with a change of rate: its own slope predicts
	pending   bool    // the last sample stepped: the next one says which kind
	stepBy    time.Duration
	stepAt    time.Duration
	stepRate  float64 // the rate before the step
}

// NewTracker returns a tracker that keeps at most window samples (at least
// 3) and sees a step beyond tolerance (negative counts as 0).
func NewTracker(window int, tolerance time.Duration) *Tracker {
	return &Tracker{window: max(window, 3), tolerance: max(tolerance, 0)}
}

// Reading is what a tracker knows after a sample.
type Reading struct {
	Rate     float64       // as [Rate], over the samples since the last step; valid if RateOK
	RateErr  float64       // [RateError] of the same samples
	RateOK   bool          // enough samples for Rate since the last step
	Step     time.Duration // != 0: this sample stepped, by this much beyond the rate (> 0 forward)
	Jumped   bool          // the step of the sample before was a jump, Jump
	Jump     Jump
	Settling bool // the clock changed its rate and Rate has not enough samples of the new one
}

// Add takes the next sample. A sample not later than the last one (in
// local time) is ignored.
func (t *Tracker) Add(s Sample) Reading {
	n := len(t.seg)
	if n > 0 && s.Local <= t.seg[n-1].Local {
		return t.reading()
	}
	if n == 0 {
		t.seg = append(t.seg, s)
		return t.reading()
	}
	last := t.seg[n-1]
	if t.pending {
		t.pending = false
		jumped := !stepped(last, s, t.stepRate, t.tolerance)
		t.fit = !jumped
		if jumped {
			t.carried = t.stepRate
		}
		t.push(s)
		r := t.reading()
		if jumped {
			r.Jumped, r.Jump = true, Jump{At: t.stepAt, By: t.stepBy}
		}
		return r
	}
	rate := t.predict()
	if step := stepOf(last, s, rate); stepped(last, s, rate, t.tolerance) {
		t.pending, t.stepBy, t.stepAt, t.stepRate = true, time.Duration(step), s.Local, rate
		t.seg = append(t.seg[:0], s)
		r := t.reading()
		r.Step = time.Duration(step)
		return r
	}
	t.push(s)
	return t.reading()
}

func (t *Tracker) push(s Sample) {
	if len(t.seg) < t.window {
		t.seg = append(t.seg, s)
		return
	}
	copy(t.seg, t.seg[1:])
	t.seg[len(t.seg)-1] = s
}

// predict is the rate the next step is judged by.
func (t *Tracker) predict() float64 {
	if r, ok := Rate(t.seg); ok {
		t.carried = r
		return r
	}
	if t.fit && len(t.seg) >= 2 {
		if r, ok := slope(t.seg); ok {
			return r
		}
	}
	return t.carried
}

func (t *Tracker) reading() Reading {
	r, ok := Rate(t.seg)
	out := Reading{Rate: r, RateOK: ok, RateErr: RateError(t.seg)}
	out.Settling = t.fit && !ok
	return out
}

// stepOf is how much further b's clock moved than a's beyond rate, in ns.
func stepOf(a, b Sample, rate float64) float64 {
	return b.offsetFrom(a) - rate*float64(b.Local-a.Local)
}

// stepped reports a step beyond tolerance and the two round trips, as
// [Jumps] judges it.
func stepped(a, b Sample, rate float64, tolerance time.Duration) bool {
	return math.Abs(stepOf(a, b, rate)) > float64(tolerance+a.RTT+b.RTT)
}

// slope is the weighted least-squares slope of the offset (see
// [Sample.weight]) with no minimum span.
func slope(samples []Sample) (float64, bool) {
	var sw, sx, sy, sxx, sxy float64
	first := samples[0]
	for _, s := range samples {
		w := s.weight()
		x, y := float64(s.Local-first.Local), s.offsetFrom(first)
		sw, sx, sy, sxx, sxy = sw+w, sx+w*x, sy+w*y, sxx+w*x*x, sxy+w*x*y
	}
	den := sw*sxx - sx*sx
	if den == 0 || math.IsNaN(den) {
		return 0, false
	}
	return (sw*sxy - sx*sy) / den, true
}
