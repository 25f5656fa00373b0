package allocjobs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"quorumlock.dev/fence"
	"quorumlock.dev/redlock"
)

// Config is one pass over the jobs.
type Config struct {
	Jobs      int64         // orders to ship
	SKUs      int           // stock rows; the lock is per SKU
	Workers   int           // goroutines taking jobs
	TTL       time.Duration // lock lease, and the queue's redelivery delay
	Pause     time.Duration // how long a paused holder stops; longer than TTL to outlive its lease
	PauseRate float64       // fraction of jobs whose first holder pauses
	Seed      uint64        // picks the paused jobs: the same in every pass with one seed
	Stock     int64         // units per SKU at the start
	// Stall ends the run with ErrStalled when no delivery finishes for this
	// long: servers that cannot keep up must not keep a run going for ever.
	// Zero is DefaultStall(TTL, Pause).
	Stall time.Duration
	// Done, when set, is called after each job's first delivery was
	// handled, from any worker: a progress display's count.
	Done func()
}

// ErrStalled reports a run that stopped because no delivery finished within
// its Stall window: every lock attempt kept timing out or waiting.
var ErrStalled = errors.New("allocjobs: the run made no progress")

// DefaultStall is the stall window of a run with ttl and pause: far above
// what a healthy delivery takes, a lease and a pause included.
func DefaultStall(ttl, pause time.Duration) time.Duration {
	return max(10*time.Second, 20*(ttl+pause))
}

// Validate reports the first setting that cannot make a run.
func (c Config) Validate() error {
	switch {
	case c.Jobs < 1:
		return fmt.Errorf("allocjobs: jobs %d below 1", c.Jobs)
	case c.SKUs < 1:
		return fmt.Errorf("allocjobs: skus %d below 1", c.SKUs)
	case c.Workers < 1:
		return fmt.Errorf("allocjobs: workers %d below 1", c.Workers)
	case c.TTL <= 0:
		return fmt.Errorf("allocjobs: ttl %v not positive", c.TTL)
	case c.PauseRate < 0 || c.PauseRate > 1:
		return fmt.Errorf("allocjobs: pause rate %v outside [0, 1]", c.PauseRate)
	case c.PauseRate > 0 && c.Pause <= c.TTL:
		return fmt.Errorf("allocjobs: pause %v must outlast the ttl %v, or no lease is lost", c.Pause, c.TTL)
	case c.Stall < 0:
		return fmt.Errorf("allocjobs: stall window %v is negative", c.Stall)
	}
	return nil
}

// Result is one pass.
type Result struct {
	Mode        string  `json:"mode"` // fenced or unfenced
	Jobs        int64   `json:"jobs"`
	Pauses      int64   `json:"pauses"`      // holders paused past their lease
	Redelivered int64   `json:"redelivered"` // jobs handed out again: their holder paused, lost its lease or failed
	Shipments   int64   `json:"shipments"`
	Orders      int64   `json:"orders"`     // distinct orders shipped
	Duplicates  int64   `json:"duplicates"` // shipments beyond the first of an order
	Rejections  int64   `json:"rejections"` // writes the storage refused for a stale fence
	Errors      int64   `json:"errors"`     // anything else
	FirstError  string  `json:"first_error,omitempty"`
	WallSeconds float64 `json:"wall_s"`
}

type job struct {
	order    int64
	delivery int
	paused   bool // a holder of this job has paused already: a job pauses once
}

// Run ships cfg.Jobs orders through client and store: fenced when the
// client was built with redlock.WithFence. The store is set up afresh.
func Run(ctx context.Context, cfg Config, client *redlock.Client, store Store) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	if err := store.Setup(ctx, cfg.SKUs, cfg.Stock); err != nil {
		return Result{}, err
	}
	r := &runner{cfg: cfg, client: client, store: store, queue: make(chan job, 2*cfg.Workers)}
	r.resources = make([]string, cfg.SKUs)
	for i := range r.resources {
		r.resources[i] = "alloc:SKU-" + strconv.Itoa(i)
	}
	start := time.Now()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stall := cfg.Stall
	if stall == 0 {
		stall = DefaultStall(cfg.TTL, cfg.Pause)
	}
	watched := make(chan struct{})
	defer close(watched)
	go r.watch(stall, watched, cancel)

	var workers sync.WaitGroup
	for range cfg.Workers {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for j := range r.queue {
				r.handle(ctx, j)
				r.handled.Add(1)
				if j.delivery == 1 && cfg.Done != nil {
					cfg.Done()
				}
				r.pending.Done()
			}
		}()
	}
	go func() {
		for order := range cfg.Jobs {
			r.pending.Add(1)
			select {
			case r.queue <- job{order: order, delivery: 1}:
			case <-ctx.Done():
				r.pending.Done()
			}
		}
		r.pending.Wait()
		close(r.queue)
	}()
	workers.Wait()

	res := Result{
		Mode: "unfenced", Jobs: cfg.Jobs, Pauses: r.pauses.Load(), Redelivered: r.redelivered.Load(),
		Rejections: r.rejections.Load(), Errors: r.errs.Load(), WallSeconds: time.Since(start).Seconds(),
	}
	if r.fenced.Load() {
		res.Mode = "fenced"
	}
	if first := r.firstErr.Load(); first != nil {
		res.FirstError = (*first).Error()
		if errors.Is(*first, redlock.ErrInvalidArgument) {
			return res, *first
		}
	}
	if err := context.Cause(ctx); err != nil {
		return res, err
	}
	audit, err := store.Audit(context.WithoutCancel(ctx))
	if err != nil {
		return res, err
	}
	res.Shipments, res.Orders, res.Duplicates = audit.Shipments, audit.Orders, audit.Duplicates
	return res, nil
}

type runner struct {
	cfg       Config
	client    *redlock.Client
	store     Store
	queue     chan job
	resources []string
	pending   sync.WaitGroup // deliveries not yet handled

	fenced                                         atomic.Bool
	pauses, redelivered, rejections, errs, handled atomic.Int64
	firstErr                                       atomic.Pointer[error]
}

// handle is one delivery of a job: lock the SKU, claim and read, maybe
// pause past the lease, ship.
func (r *runner) handle(ctx context.Context, j job) {
	sku := int(j.order % int64(r.cfg.SKUs))
	l, err := r.client.Lock(ctx, r.resources[sku], r.cfg.TTL)
	if err != nil {
		if ctx.Err() == nil {
			r.failed(err)
			r.redeliver(ctx, j, 0)
		}
		return
	}
	defer func() { _ = l.Unlock(context.WithoutCancel(ctx)) }() // a paused holder's Unlock finds the lease gone; expected
	f, fenced := l.Fence()
	if fenced {
		r.fenced.Store(true)
	}
	shipped, err := r.store.Begin(ctx, sku, j.order, f)
	if r.failed(err) {
		r.redeliver(ctx, j, 0) // no ack: the queue hands the job out again
		return
	}
	if shipped {
		return
	}
	if !j.paused && r.paused(j.order) {
		j.paused = true
		r.pauses.Add(1)
		// The queue sees no ack within the lease and hands the job to
		// another worker, while this holder sleeps through its lease.
		r.redeliver(ctx, j, r.cfg.TTL)
		select {
		case <-time.After(r.cfg.Pause):
		case <-ctx.Done():
			return
		}
		// Whatever happens to this write, the job is already out again.
		r.failed(r.store.Ship(ctx, sku, j.order, f))
		return
	}
	if r.failed(r.store.Ship(ctx, sku, j.order, f)) {
		r.redeliver(ctx, j, 0)
	}
}

// watch cancels the run with ErrStalled when no delivery finished within
// stall, until done is closed.
func (r *runner) watch(stall time.Duration, done <-chan struct{}, cancel context.CancelCauseFunc) {
	tick := time.NewTicker(stall / 10)
	defer tick.Stop()
	last, since := r.handled.Load(), time.Now()
	for {
		select {
		case <-done:
			return
		case now := <-tick.C:
			if n := r.handled.Load(); n != last {
				last, since = n, now
			} else if now.Sub(since) >= stall {
				cause := fmt.Errorf("%w: no delivery finished in %v (%d handled before, of %d jobs): the servers do not keep up; try a longer node timeout or fewer workers",
					ErrStalled, stall.Round(time.Millisecond), n, r.cfg.Jobs)
				if first := r.firstErr.Load(); first != nil {
					cause = fmt.Errorf("%w; first error: %w", cause, *first)
				}
				cancel(cause)
				return
			}
		}
	}
}

// maxDeliveries bounds how often one job is handed out: a job that fails
// for good must not loop for ever.
const maxDeliveries = 20

// redeliver hands j out again after delay, as a queue does with a job that
// was not acknowledged: its holder paused, or lost its lease (a rejected
// fence) or failed.
func (r *runner) redeliver(ctx context.Context, j job, delay time.Duration) {
	if j.delivery >= maxDeliveries || ctx.Err() != nil {
		return
	}
	r.redelivered.Add(1)
	r.pending.Add(1)
	next := job{order: j.order, delivery: j.delivery + 1, paused: j.paused}
	time.AfterFunc(delay, func() {
		select {
		case r.queue <- next:
		case <-ctx.Done():
			r.pending.Done()
		}
	})
}

// failed counts err and reports whether there was one.
func (r *runner) failed(err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, fence.ErrFenceRejected):
		r.rejections.Add(1)
	default:
		r.errs.Add(1)
		r.firstErr.CompareAndSwap(nil, &err)
	}
	return true
}

// paused picks the jobs whose first holder pauses: a hash of the order and
// the seed, so every pass pauses the same jobs.
func (r *runner) paused(order int64) bool {
	x := uint64(order) ^ r.cfg.Seed
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11)/(1<<53) < r.cfg.PauseRate
}
