package quorum

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestConcurrentRounds runs many rounds at once with random answers, delays,
// timeouts and cancellations, and undoes some of them; it is meant for -race.
func TestConcurrentRounds(t *testing.T) {
	const rounds = 200
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)

	var wg sync.WaitGroup
	for k := range rounds {
		rng := rand.New(rand.NewPCG(seed, uint64(k)))
		wg.Go(func() { randomRound(t, rng) })
	}
	wg.Wait()
}

func randomRound(t *testing.T, rng *rand.Rand) {
	n := 1 + rng.IntN(7)
	need := rng.IntN(n + 2) // includes the out-of-range 0 and n+1
	timeout := time.Duration(1+rng.IntN(4)) * time.Millisecond
	s := make(script, n)
	delay := make([]time.Duration, n)
	for i := range n {
		s[i] = []Answer{Agreed, Refused, Failed}[rng.IntN(3)]
		delay[i] = time.Duration(rng.IntN(3000)) * time.Microsecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if rng.IntN(4) == 0 {
		time.AfterFunc(time.Duration(rng.IntN(3000))*time.Microsecond, cancel)
	}
	withUndo := rng.IntN(2) == 0

	var (
		calls    sync.WaitGroup
		returned = make([]atomic.Bool, n)
		undone   = make([]atomic.Int32, n)
	)
	calls.Add(n)
	call := func(_ context.Context, node int) (bool, error) {
		defer calls.Done()
		defer returned[node].Store(true)
		time.Sleep(delay[node])
		return s.answer(nil, node)
	}
	undo := func(_ context.Context, node int) {
		assert.True(t, returned[node].Load(), "node %d undone before its call returned", node)
		undone[node].Add(1)
	}

	var r *Round
	if !assert.True(t, returnsWithin(prompt, func() { r = Group{Nodes: n, Need: need, Timeout: timeout}.Do(ctx, call) }), "Do did not return") {
		return
	}
	assert.Equal(t, n, r.Nodes())
	assert.Equal(t, n, r.Count(Agreed)+r.Count(Refused)+r.Count(Failed)+r.Count(Pending))
	assert.Equal(t, tally(r), countsOf(r))
	firstPending := -1
	for i := range n {
		if got := r.Answer(i); got != Pending {
			assert.Equal(t, s[i], got, "node %d", i)
		} else if firstPending < 0 {
			firstPending = i
		}
	}
	decided := need > 0 && need <= n && (r.Count(Agreed) >= need || r.Count(Refused)+r.Count(Failed) > n-need)
	switch {
	case r.TimedOut:
		assertEnded(t, r, true, ErrTimeout)
	case firstPending >= 0 && !decided:
		// Only the context ends an undecided round before its timeout.
		assertEnded(t, r, false, context.Canceled)
	case firstPending >= 0 && r.Err(firstPending) != nil:
		// The context ended the round just before the answers that decide
		// it were counted.
		assert.Error(t, ctx.Err())
		assertEnded(t, r, false, context.Canceled)
	default:
		assertEnded(t, r, false, nil)
	}

	if withUndo {
		if !assert.True(t, returnsWithin(prompt, func() { r.Undo(context.Background(), long, undo) }), "Undo did not return") {
			return
		}
		for i := range n {
			if r.Answer(i) != Pending {
				assert.Equal(t, int32(1), undone[i].Load(), "node %d answered, its undo has not run", i)
			}
		}
		if !assert.True(t, returnsWithin(prompt, r.WaitUndone), "WaitUndone did not return") {
			return
		}
	}
	if !assert.True(t, returnsWithin(prompt, calls.Wait), "calls did not return") {
		return
	}
	for i := range n {
		want := int32(0)
		if withUndo {
			want = 1
		}
		assert.Equal(t, want, undone[i].Load(), "undos of node %d", i)
	}
}

// sink keeps benchmark results alive, so the compiler cannot drop the work.
var sink *Round

func BenchmarkDo(b *testing.B) {
	agree := func(context.Context, int) (bool, error) { return true, nil }
	ctx := context.Background()
	for _, n := range []int{1, 3, 5, 7} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			need := Majority(n)
			for b.Loop() {
				sink = Group{Nodes: n, Need: need, Timeout: time.Second}.Do(ctx, agree)
			}
		})
	}
}
