package benchrun

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/stretchr/testify/assert"
)

func TestFairness(t *testing.T) {
	for _, tc := range []struct {
		name     string
		sections []int64
		want     float64
	}{
		{"no goroutines", nil, 0},
		{"nobody had a turn", []int64{0, 0, 0}, 0},
		{"one starved", []int64{40, 0, 10}, 0},
		{"equal turns", []int64{7, 7, 7, 7}, 1},
		{"one goroutine", []int64{5}, 1},
		{"fewest over most", []int64{30, 12, 60, 45}, 0.2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.InDelta(t, tc.want, fairness(tc.sections), 1e-12)
		})
	}
}

func TestHandoffs(t *testing.T) {
	at := func(ms float64) time.Time {
		return time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(ms * float64(time.Millisecond)))
	}
	sections := []section{
		{worker: 0, acquired: at(0), released: at(1.0)},
		{worker: 0, acquired: at(1.1), released: at(2.0)},               // took it back: no handoff
		{worker: 1, acquired: at(2.3), released: at(3.0)},               // 0 -> 1: 300 µs
		{worker: 2, acquired: at(2.95), released: at(4.0)},              // won before 1 called Unlock (a violation): 0
		{worker: 3, acquired: at(5.0), released: at(6.0), failed: true}, // 2 -> 3: 1 ms; its Unlock failed
		{worker: 0, acquired: at(9.0), released: at(10.0)},              // after a failed release: unknown, left out
		{worker: 1, acquired: at(10.05), released: at(11.0)},            // 0 -> 1: 50 µs
	}
	var got []time.Duration
	handoffs(sections, func(d time.Duration) { got = append(got, d) })
	assert.Equal(t, []time.Duration{300 * time.Microsecond, 0, time.Millisecond, 50 * time.Microsecond}, got)

	got = nil
	handoffs(sections[:1], func(d time.Duration) { got = append(got, d) })
	assert.Empty(t, got, "one section hands off to nobody")
}

// TestOverlaps: in a log merged from several processes and sorted by
// acquisition, a section that began before an earlier one was released is a
// violation, whichever earlier one it was.
func TestOverlaps(t *testing.T) {
	at := func(ms float64) time.Time {
		return time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(ms * float64(time.Millisecond)))
	}
	assert.Zero(t, overlaps(nil))
	assert.Zero(t, overlaps([]section{
		{worker: 0, acquired: at(0), released: at(1)},
		{worker: 1, acquired: at(1.001), released: at(2)},
		{worker: 2, acquired: at(2.5), released: at(3), failed: true},
		{worker: 0, acquired: at(3.2), released: at(4)},
	}), "one holder at a time")
	assert.Equal(t, int64(2), overlaps([]section{
		{worker: 0, acquired: at(0), released: at(10)}, // its lease ran out while it held on
		{worker: 1, acquired: at(5), released: at(6)},  // began while 0 held
		{worker: 2, acquired: at(7), released: at(8)},  // 1 had let go, 0 had not
		{worker: 1, acquired: at(11), released: at(12)},
	}))
}

// TestGuardOrder: the log keeps the sections in the order they began, and
// end fills the section begin returned.
func TestGuardOrder(t *testing.T) {
	var g guard
	t0 := time.Now()
	a := g.begin(3, t0)
	g.end(a, t0.Add(time.Millisecond), false)
	b := g.begin(5, t0.Add(2*time.Millisecond))
	assert.Equal(t, []int{0, 1}, []int{a, b})
	assert.Equal(t, 3, g.sections[0].worker)
	assert.Equal(t, t0.Add(time.Millisecond), g.sections[0].released)
	assert.True(t, g.sections[1].released.IsZero(), "not released yet")
}

// TestRedsyncSettle: a redsync attempt is counted when its SetNX calls have
// been made; a lost one that won some masters but no quorum split the votes.
func TestRedsyncSettle(t *testing.T) {
	for _, tc := range []struct {
		name             string
		calls, won       int32
		wonLock          bool
		all, lost, split int64
	}{
		{"no attempt since the last", 0, 0, false, 0, 0, 0},
		{"won", 5, 3, true, 1, 0, 0},
		{"lost to a holder", 5, 0, false, 1, 1, 0},
		{"split", 5, 2, false, 1, 1, 1},
		{"a quorum too late", 5, 3, false, 1, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var counted rounds
			l := newRedsyncLocker(make([]redsyncredis.Pool, 5), &counted)
			l.calls.Store(tc.calls)
			l.won.Store(tc.won)
			l.settle(tc.wonLock)
			assert.Equal(t, []int64{tc.all, tc.lost, tc.split}, []int64{counted.all.Load(), counted.lost.Load(), counted.split.Load()})
			assert.Zero(t, l.calls.Load()+l.won.Load(), "the next attempt starts from nothing")
		})
	}
}

func TestRedsyncLost(t *testing.T) {
	assert.True(t, redsyncLost(redsync.ErrFailed))
	assert.True(t, redsyncLost(&redsync.ErrTaken{Nodes: []int{0, 1, 2}}))
	assert.True(t, redsyncLost(errors.Join(&redsync.ErrNodeTaken{Node: 1}, &redsync.RedisError{Node: 2, Err: errors.New("EOF")})))
	assert.False(t, redsyncLost(&redsync.RedisError{Node: 2, Err: errors.New("EOF")}))
	assert.False(t, redsyncLost(fmt.Errorf("dial: %w", errors.New("refused"))))
}
