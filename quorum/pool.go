package quorum

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// A Pool runs the calls and undos of rounds on goroutines it keeps, so
// that a call starts on a goroutine whose stack has already grown to what
// a Redis client's call needs. A goroutine of its own for every call starts
// small and grows its stack, copying it, inside the client's deep call
// chain: in a profile of TryLock and Unlock over five redis-servers
// (go-redis) that growth was 14% of the process's CPU (docs/benchmarks.md).
// At most maxIdle goroutines wait for work; a task that finds none waiting
// gets a new goroutine, which then stays if fewer than maxIdle wait.
// Close ends the waiting ones at once and the busy ones when their task
// returns; [Pool.Wait] waits for the busy ones, so that an owner's Close
// can let the calls and undos still out finish before it closes what they
// use. A nil *Pool runs each task on a goroutine of its own.
type Pool struct {
	tasks   chan task
	done    chan struct{}
	once    sync.Once
	idle    atomic.Int32
	maxIdle int32

	// busy counts the tasks handed over and not yet returned; waiters the
	// Wait calls that may be told of its fall to 0 through drained.
	busy    atomic.Int64
	waiters atomic.Int32
	mu      sync.Mutex
	drained chan struct{}
}

// NewPool returns a pool that keeps at most maxIdle goroutines waiting.
func NewPool(maxIdle int) *Pool {
	return &Pool{tasks: make(chan task), done: make(chan struct{}), maxIdle: int32(max(maxIdle, 0))}
}

// Close ends the pool's waiting goroutines; tasks given to it after Close
// still run, each on a goroutine that ends with it.
func (p *Pool) Close() {
	if p != nil {
		p.once.Do(func() { close(p.done) })
	}
}

// Go runs f on a goroutine of p (a new one when none waits), counted as
// busy until f returns: work an owner starts in the background that
// [Pool.Wait] should wait for, such as a release that outlives its caller.
func (p *Pool) Go(f func()) {
	p.start(task{fn: f})
}

// Wait waits until no task of p runs (no call, undo or [Pool.Go] function
// handed to it is still out), or until by, and reports whether none runs.
// Tasks handed over while it waits are waited for too.
func (p *Pool) Wait(by time.Time) bool {
	if p == nil {
		return true
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		p.mu.Lock()
		// Counted before busy is read: a task that brings busy to 0 after
		// this read sees the waiter and closes drained (under mu, so after
		// this section made it).
		p.waiters.Add(1)
		if p.busy.Load() == 0 {
			p.waiters.Add(-1)
			p.mu.Unlock()
			return true
		}
		if p.drained == nil {
			p.drained = make(chan struct{})
		}
		drained := p.drained
		p.mu.Unlock()
		left := time.Until(by)
		if left <= 0 {
			p.waiters.Add(-1)
			return p.busy.Load() == 0
		}
		if timer == nil {
			timer = time.NewTimer(left)
		}
		select {
		case <-drained:
			p.waiters.Add(-1)
		case <-timer.C:
			p.waiters.Add(-1)
			return p.busy.Load() == 0
		}
	}
}

// finished counts a task's return, and wakes the Wait calls when it was the
// last one out.
func (p *Pool) finished() {
	if p.busy.Add(-1) != 0 || p.waiters.Load() == 0 {
		return
	}
	p.mu.Lock()
	if p.drained != nil {
		close(p.drained)
		p.drained = nil
	}
	p.mu.Unlock()
}

// task is one node's call of r (undo nil) or its undo: the arguments of
// Round.run or Round.runUndo, passed by value so that handing a task over
// allocates nothing; or a function of [Pool.Go] (fn).
type task struct {
	r       *Round
	node    int
	call    Call
	results chan<- result
	ctx     context.Context
	undo    func(context.Context, int)
	waited  bool
	fn      func()
}

func (t *task) do() {
	switch {
	case t.fn != nil:
		t.fn()
	case t.undo == nil:
		t.r.run(t.node, t.call, t.results)
	default:
		t.r.runUndo(t.ctx, t.undo, t.node, t.waited)
	}
}

// start runs t on a waiting goroutine of p, or on a new one.
func (p *Pool) start(t task) {
	if p != nil {
		p.busy.Add(1)
		select {
		case p.tasks <- t:
			return
		default:
		}
	}
	go p.work(t)
}

// work runs t, then waits for the next task while fewer than maxIdle
// goroutines wait and the pool is open.
func (p *Pool) work(t task) {
	for {
		t.do()
		if p != nil {
			p.finished()
		}
		if p == nil || p.idle.Add(1) > p.maxIdle {
			if p != nil {
				p.idle.Add(-1)
			}
			return
		}
		select {
		case t = <-p.tasks:
			p.idle.Add(-1)
		case <-p.done:
			p.idle.Add(-1)
			return
		}
	}
}
