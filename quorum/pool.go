package quorum

import (
	"context"
	"sync"
	"sync/atomic"
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
// returns. A nil *Pool runs each task on a goroutine of its own.
type Pool struct {
	tasks   chan task
	done    chan struct{}
	once    sync.Once
	idle    atomic.Int32
	maxIdle int32
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

// task is one node's call of r (undo nil) or its undo: the arguments of
// Round.run or Round.runUndo, passed by value so that handing a task over
// allocates nothing.
type task struct {
	r       *Round
	node    int
	call    Call
	results chan<- result
	ctx     context.Context
	undo    func(context.Context, int)
	waited  bool
}

func (t *task) do() {
	if t.undo == nil {
		t.r.run(t.node, t.call, t.results)
	} else {
		t.r.runUndo(t.ctx, t.undo, t.node, t.waited)
	}
}

// start runs t on a waiting goroutine of p, or on a new one.
func (p *Pool) start(t task) {
	if p != nil {
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
