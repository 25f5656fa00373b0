package benchrun

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"quorumlock.dev/cmd/redlock-bench/internal/progress"
	"quorumlock.dev/cmd/redlock-bench/internal/report"
	"quorumlock.dev/internal/harness/critical"
	"quorumlock.dev/redlock"
)

// guard is the run's own view of one resource in the contended scenario: how
// many goroutines hold it right now, and the sections taken of it in the
// current slice, in the order they began.
type guard struct {
	holders  atomic.Int32
	mu       sync.Mutex
	sections []section
}

// section is one hold of a resource by one goroutine.
type section struct {
	worker   int
	acquired time.Time // Lock returned
	released time.Time // Unlock called; zero while it is held
	failed   bool      // Unlock returned an error: where the lock went is unknown
}

// unlocker is a held lock as the contended loop releases it: a
// *redlock.Lock, or a redsync mutex in the redsync rows.
type unlocker interface {
	Unlock(ctx context.Context) error
}

// begin records a section that began at acquired and returns its index. The
// order of the log is the order of the holders: a holder appends before it
// lets go of the resource, so the next one can only append after it.
func (g *guard) begin(worker int, acquired time.Time) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sections = append(g.sections, section{worker: worker, acquired: acquired})
	return len(g.sections) - 1
}

func (g *guard) end(i int, released time.Time, failed bool) {
	g.mu.Lock()
	g.sections[i].released, g.sections[i].failed = released, failed
	g.mu.Unlock()
}

// handoffs calls record with the time from each release (Unlock called) to
// the next section's acquisition (Lock returned), where the next holder is
// another goroutine; a goroutine that takes the lock back is no handoff. A
// release that failed leaves its handoff unknown, and out.
func handoffs(sections []section, record func(time.Duration)) {
	for k := 1; k < len(sections); k++ {
		prev, next := sections[k-1], sections[k]
		if prev.worker == next.worker || prev.failed || prev.released.IsZero() {
			continue
		}
		record(max(next.acquired.Sub(prev.released), 0))
	}
}

// overlaps counts the sections of a log in order of acquisition that began
// before an earlier one was released: the violations of sections logged in
// several processes, where no counter in memory sees them all. A section
// that is still held, or whose Unlock failed, counts as held until its
// Unlock was called.
func overlaps(sections []section) int64 {
	var n int64
	var held time.Time // the latest release of the sections so far
	for k, s := range sections {
		if k > 0 && s.acquired.Before(held) {
			n++
		}
		if s.released.After(held) {
			held = s.released
		}
	}
	return n
}

// rounds counts a contended row's acquisition attempts as its clients'
// Attempt hook hears of them: all of them (Lock's retries and handoffs
// included), those lost to another holder, and of those the ones whose votes
// split: some masters won, no majority.
type rounds struct{ all, lost, split atomic.Int64 }

func (r *rounds) attempted(_ context.Context, e redlock.Event) {
	err := e.Err
	r.all.Add(1)
	if errors.Is(err, redlock.ErrNotAcquired) {
		r.lost.Add(1)
		if errors.Is(err, redlock.ErrVotesSplit) {
			r.split.Add(1)
		}
	}
}

// collect moves what r counted into t.
func (r *rounds) collect(t *tally) {
	t.rounds += r.all.Swap(0)
	t.lostRounds += r.lost.Swap(0)
	t.splitRounds += r.split.Swap(0)
}

// fairness is the fewest sections a goroutine completed over the most: 1
// when all had equal turns, 0 when one had none (or nobody had any).
func fairness(sections []int64) float64 {
	if len(sections) == 0 {
		return 0
	}
	lo, hi := sections[0], sections[0]
	for _, n := range sections[1:] {
		lo, hi = min(lo, n), max(hi, n)
	}
	if hi == 0 {
		return 0
	}
	return float64(lo) / float64(hi)
}

// contendedFigures fills the contended scenario's fields of r from t.
func contendedFigures(r *report.Row, t *tally) {
	if t.window > 0 {
		var n int64
		for _, s := range t.sections {
			n += s
		}
		r.SectionsPerSec = float64(n) / t.window
	}
	if t.wait.TotalCount() > 0 {
		r.WaitP99Us = float64(t.wait.ValueAtQuantile(99))
	}
	if t.handoff.TotalCount() > 0 {
		r.HandoffP50Us = float64(t.handoff.ValueAtQuantile(50))
		r.HandoffP99Us = float64(t.handoff.ValueAtQuantile(99))
	}
	r.Fairness = fairness(t.sections)
	r.Violations = t.violations
	r.Rounds, r.LostRounds, r.SplitRounds = t.rounds, t.lostRounds, t.splitRounds
	if t.lostRounds > 0 {
		r.SplitPct = 100 * float64(t.splitRounds) / float64(t.lostRounds)
	}
}

// waitBound is how long one Lock call of the contended scenario may wait.
// Even a holder that died is gone after one TTL, so a waiter that has not
// won in two is stuck, and the run must not hang on it (a Lock that waits
// until its context ends needs this).
func waitBound(ttl time.Duration) time.Duration { return 2 * ttl }

// contend is the contended scenario's loop: Lock (which waits), hold, Unlock,
// with an in-process check that no two goroutines hold a resource at once.
// A Lock called before the end of the slice is waited for, so that no wait
// is cut short and left out; but only sections that began before the end
// count towards sections per second and fairness, since after it the
// waiters no longer compete with the goroutines that have stopped.
func (w *worker) contend(ctx context.Context, cfg Config, v *variant, end time.Time, counted bool, left *atomic.Int64, invalid *atomic.Pointer[error], bar *progress.Bar) {
	for w.more(ctx, counted, left, end) {
		k := w.rng.IntN(len(v.resources))
		g := v.guards[k]
		start := time.Now()
		lctx, cancel := context.WithTimeout(ctx, waitBound(cfg.TTL))
		var l unlocker
		var err error
		switch {
		case v.redsync != nil:
			l, err = v.redsync[w.id].lock(lctx, v.resources[k], cfg.TTL)
		case len(v.clients) > 0:
			l, err = v.clients[w.id%len(v.clients)].Lock(lctx, v.resources[k], cfg.TTL)
		default:
			l, err = v.client.Lock(lctx, v.resources[k], cfg.TTL)
		}
		won := time.Now()
		cancel()
		w.record(won.Sub(start), bar)
		if err != nil {
			if v.redsync != nil && ctx.Err() == nil && redsyncLost(err) {
				w.contended++
			} else if !w.failed(ctx, err, invalid) {
				return
			}
			continue
		}
		_ = w.wait.RecordValue(micros(won.Sub(start)))
		if g.holders.Add(1) > 1 {
			w.violations++
		}
		i := g.begin(w.id, won)
		if counted || won.Before(end) {
			w.sections++
		}
		if cfg.Hold > 0 {
			critical.Hold(cfg.Hold)
		}
		// Let go in our books before the masters do, so the next holder
		// never counts us. The section ends when Unlock is called: a release
		// hands the lock to the next waiter before Unlock returns.
		g.holders.Add(-1)
		unlocking := time.Now()
		err = l.Unlock(ctx)
		g.end(i, unlocking, err != nil)
		if err != nil {
			w.errored(err)
			continue
		}
		_ = w.cycle.RecordValue(micros(time.Since(start)))
		w.acquired++
	}
}
