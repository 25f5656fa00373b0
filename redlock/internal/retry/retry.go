// Package retry tries again, in the background, the calls to a master
// whose first try got no reply (a timeout, a refused or reset connection):
// a release that may have left a lock's key there, or the removal of a
// queue entry. One goroutine per master that has calls to retry tries the
// oldest once each interval (only the oldest while the master gives no
// reply: the rest wait behind it), and at once when [Queue.Replied] says
// that the master answered another call. A call is dropped once it got a
// reply (the script ran) or once its key has expired by itself. The
// package knows nothing of locks: what a call is and when it is over are
// its caller's.
package retry

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/internal/bounded"
)

// Max bounds the calls waiting for one master: beyond it the oldest is
// dropped (its key expires by itself), so that a master that is down
// while many calls fail holds bounded memory.
const Max = 4096

// A Try is one try of a call on master i, bounded by ctx; an error for
// which driver.Replied is false keeps the call queued.
type Try func(ctx context.Context, i int, script *driver.Script, keys []string, args []any) error

// Queue holds the calls to retry, one list and at most one goroutine per
// master. Its zero value is not usable: see New.
type Queue struct {
	try      Try
	now      func() time.Time // the caller's monotonic clock
	interval time.Duration    // between tries, and each try's bound
	failed   func(i int, what string, err error)

	mu      sync.Mutex
	queued  [][]call
	running []atomic.Bool   // written under mu; read without it by Replied
	kick    []chan struct{} // a reply from the master: try now
	closed  bool
	ids     uint64
	stop    chan struct{}
	wg      sync.WaitGroup
}

// call is one script to try again on a master.
type call struct {
	script *driver.Script
	keys   []string
	args   []any
	until  time.Time // on the queue's clock: the key has expired by then
	what   string    // for the log
	id     uint64
}

// New returns a queue for n masters whose calls are tried by try, once
// each interval, with the clock now; failed, when not nil, hears of each
// retry that got no reply (what is the name Add was given).
func New(n int, try Try, now func() time.Time, interval time.Duration, failed func(i int, what string, err error)) *Queue {
	q := &Queue{try: try, now: now, interval: interval, failed: failed,
		queued: make([][]call, n), running: make([]atomic.Bool, n), kick: make([]chan struct{}, n), stop: make(chan struct{})}
	for i := range q.kick {
		q.kick[i] = make(chan struct{}, 1)
	}
	return q
}

// Add queues script on master i, for a key that expires within ttl of now
// (the master's clock may run slow: tried until ttl + 2% + one interval),
// and starts master i's goroutine if none runs. After Close it does
// nothing.
func (q *Queue) Add(i int, script *driver.Script, keys []string, args []any, ttl time.Duration, what string) {
	until := q.now().Add(ttl + ttl/50 + q.interval)
	c := call{script: script, keys: keys, args: args, until: until, what: what}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	if len(q.queued[i]) >= Max {
		q.queued[i] = q.queued[i][1:]
	}
	q.ids++
	c.id = q.ids
	q.queued[i] = append(q.queued[i], c)
	if !q.running[i].Load() {
		q.running[i].Store(true)
		q.wg.Add(1)
		go q.loop(i)
	}
}

// Replied tells master i's calls that another call to it got a reply: the
// master answers again, and they are tried at once, not at the end of the
// interval.
func (q *Queue) Replied(i int) {
	if q.running[i].Load() {
		select {
		case q.kick[i] <- struct{}{}:
		default:
		}
	}
}

// loop tries master i's calls until none is left, the queue closes, or
// each has expired. It tries the oldest first: while that one gets no
// reply, the master is still out of reach, and the rest wait.
func (q *Queue) loop(i int) {
	defer q.wg.Done()
	t := time.NewTimer(q.interval)
	defer t.Stop()
	for {
		select {
		case <-q.stop:
			return
		case <-t.C:
		case <-q.kick[i]:
		}
		if !q.drain(i) {
			return
		}
		t.Reset(q.interval)
	}
}

// drain tries master i's calls, oldest first, until one gets no reply
// (true: the loop waits for the next interval) or none is left (false:
// the loop ends).
func (q *Queue) drain(i int) bool {
	for {
		q.mu.Lock()
		now := q.now()
		list := q.queued[i]
		for len(list) > 0 && !now.Before(list[0].until) {
			list = list[1:] // expired on the master by now
		}
		q.queued[i] = list
		if len(list) == 0 || q.closed {
			q.running[i].Store(false)
			q.mu.Unlock()
			return false
		}
		c := list[0]
		q.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), q.interval)
		err := q.try(ctx, i, c.script, c.keys, c.args)
		cancel()
		if !driver.Replied(err) {
			if q.failed != nil {
				q.failed(i, c.what, err)
			}
			return true
		}
		q.mu.Lock()
		if list := q.queued[i]; len(list) > 0 && list[0].id == c.id {
			q.queued[i] = list[1:]
		}
		q.mu.Unlock()
	}
}

// Close stops the retries (a key they had not reached expires by itself)
// and waits for their goroutines until by. Idempotent.
func (q *Queue) Close(by time.Time) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.closed = true
	close(q.stop)
	q.mu.Unlock()
	bounded.Wait(&q.wg, by)
}

// Pending is how many calls wait to be tried again.
func (q *Queue) Pending() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for _, list := range q.queued {
		n += len(list)
	}
	return n
}
