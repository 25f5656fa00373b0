package chaosworker

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"quorumlock.dev/cmd/redlock-bench/internal/chaoscheck"
)

// Recorder collects what the workers report. Its methods are safe for concurrent use.
type Recorder struct {
	mu       sync.Mutex
	holdings map[string]*chaoscheck.Holding // by token
	order    []string                       // tokens in the order they were won
	calls    map[[2]int]*chaoscheck.Op      // by worker and call id
	attempts []Attempt
	answered map[int]bool // workers with an attempt the masters answered: won or refused
	majority []int        // per won lock, the masters found holding it
	termEnds []TermEnd
	peakG    int
	peakHeap uint64
	changed  chan struct{} // closed and replaced on every event
	bad      []string      // lines that did not parse
}

// Attempt is one lock attempt a worker reported.
type Attempt struct {
	Result  string // acquired, contended, unavailable, fence_unavailable or error
	Latency time.Duration
	At      int64 // when the attempt returned (Unix ns)
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder {
	return &Recorder{holdings: map[string]*chaoscheck.Holding{}, calls: map[[2]int]*chaoscheck.Op{}, answered: map[int]bool{}, changed: make(chan struct{})}
}

func (r *Recorder) read(worker int, out io.Reader) {
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var ev event
		err := json.Unmarshal(sc.Bytes(), &ev)
		r.mu.Lock()
		if err != nil {
			r.bad = append(r.bad, fmt.Sprintf("worker %d: %q", worker, sc.Text()))
		} else {
			r.add(worker, ev)
		}
		close(r.changed)
		r.changed = make(chan struct{})
		r.mu.Unlock()
	}
}

// add records ev; the caller holds r.mu.
func (r *Recorder) add(worker int, ev event) {
	switch ev.Kind {
	case "attempt":
		r.attempts = append(r.attempts, Attempt{Result: ev.Result, Latency: time.Duration(ev.Latency), At: ev.At})
		if ev.Result == "acquired" || ev.Result == "contended" {
			r.answered[worker] = true
		}
	case "hold":
		h := *ev.Holding
		if old, ok := r.holdings[h.Token]; ok {
			*old = h
			return
		}
		r.holdings[h.Token] = &h
		r.order = append(r.order, h.Token)
		r.majority = append(r.majority, ev.Majority)
	case "call", "ret":
		op := *ev.Op
		if ev.Kind == "call" {
			op.Outcome = chaoscheck.Unknown
		}
		r.calls[[2]int{worker, ev.ID}] = &op
	case "ready":
		r.answered[worker] = true
	case "term_end":
		r.termEnds = append(r.termEnds, *ev.Term)
	case "stats":
		r.peakG = max(r.peakG, ev.Goroutines)
		r.peakHeap = max(r.peakHeap, ev.HeapBytes)
	}
}

// waitFor returns the first recorded op that ok accepts, waiting until ctx ends.
func (r *Recorder) waitFor(ctx context.Context, ok func(op chaoscheck.Op) bool) (chaoscheck.Op, error) {
	seen := map[[2]int]bool{}
	for {
		r.mu.Lock()
		for k, op := range r.calls {
			if !seen[k] && op.Return != 0 {
				seen[k] = true
				if ok(*op) {
					r.mu.Unlock()
					return *op, nil
				}
			}
		}
		ch := r.changed
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return chaoscheck.Op{}, fmt.Errorf("chaos: waiting for the workers: %w", context.Cause(ctx))
		case <-ch:
		}
	}
}

// Claimed waits for a claim the store accepted, after since, by a worker that pred accepts (nil:
// any), until ctx ends.
func (r *Recorder) Claimed(ctx context.Context, since time.Time, pred func(op chaoscheck.Op) bool) (chaoscheck.Op, error) {
	return r.waitFor(ctx, func(op chaoscheck.Op) bool {
		return op.Kind == chaoscheck.Claim && op.Outcome == chaoscheck.OK && op.Call >= since.UnixNano() && (pred == nil || pred(op))
	})
}

// Won waits for a holding won at or after since that pred accepts (nil: any), until ctx ends.
func (r *Recorder) Won(ctx context.Context, since time.Time, pred func(h chaoscheck.Holding) bool) (chaoscheck.Holding, error) {
	for {
		r.mu.Lock()
		for _, tok := range r.order {
			h := *r.holdings[tok]
			if h.Acquired >= since.UnixNano() && (pred == nil || pred(h)) {
				r.mu.Unlock()
				return h, nil
			}
		}
		ch := r.changed
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return chaoscheck.Holding{}, fmt.Errorf("chaos: waiting for the workers: %w", context.Cause(ctx))
		case <-ch:
		}
	}
}

// Killed records that worker was killed at at: its holdings not yet released end there, since
// a dead process acts no more.
func (r *Recorder) Killed(worker int, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range r.holdings {
		if h.Worker == worker && h.Released == 0 {
			h.Released = at.UnixNano()
		}
	}
}

// TermEnds returns the ends of terms the leader workers reported so far.
func (r *Recorder) TermEnds() []TermEnd {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]TermEnd(nil), r.termEnds...)
}

// Ops returns the store calls recorded so far that pred accepts, answered or not.
func (r *Recorder) Ops(pred func(op chaoscheck.Op) bool) []chaoscheck.Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []chaoscheck.Op
	for _, op := range r.calls {
		if pred(*op) {
			out = append(out, *op)
		}
	}
	return out
}

// Holdings returns the holdings reported so far, in the order they were won.
func (r *Recorder) Holdings() []chaoscheck.Holding {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]chaoscheck.Holding, 0, len(r.order))
	for _, tok := range r.order {
		out = append(out, *r.holdings[tok])
	}
	return out
}

// Holder returns worker's live holding of res: won, not released.
func (r *Recorder) Holder(worker int, res string) (chaoscheck.Holding, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.order) - 1; i >= 0; i-- {
		h := r.holdings[r.order[i]]
		if h.Worker == worker && h.Resource == res && h.Released == 0 {
			return *h, true
		}
	}
	return chaoscheck.Holding{}, false
}

// Answered returns the number of workers that have had an attempt answered by the masters, won
// or refused: workers whose client is connected.
func (r *Recorder) Answered() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.answered)
}

// Acquisitions returns the number of locks won so far.
func (r *Recorder) Acquisitions() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.order)
}

// History is what the workers recorded, for chaoscheck.
func (r *Recorder) History(final chaoscheck.Final) chaoscheck.History {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := chaoscheck.History{Final: final}
	for _, tok := range r.order {
		h.Holdings = append(h.Holdings, *r.holdings[tok])
	}
	for _, op := range r.calls {
		o := *op
		if o.Outcome == chaoscheck.Unknown {
			o.Return = 0
		}
		h.Ops = append(h.Ops, o)
	}
	return h
}

// Live returns the tokens of the locks won and not yet released, as reported so far.
func (r *Recorder) Live() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	live := map[string]bool{}
	for tok, h := range r.holdings {
		if h.Released == 0 {
			live[tok] = true
		}
	}
	return live
}

// Summary is what the workers reported besides the history.
type Summary struct {
	Attempts       []Attempt
	TermEnds       []TermEnd // leader scenarios: how each term ended
	Majority       []int     // per won lock, the masters found holding it; -1: not checked
	PeakGoroutines int       // the most goroutines a worker ran
	PeakHeap       uint64    // the most heap a worker held, in bytes
	Bad            []string  // lines that did not parse
}

// Summary returns what the workers reported so far besides the history.
func (r *Recorder) Summary() Summary {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Summary{Attempts: r.attempts, TermEnds: r.termEnds, Majority: r.majority, PeakGoroutines: r.peakG, PeakHeap: r.peakHeap, Bad: r.bad}
}
