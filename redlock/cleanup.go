package redlock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/redlock/internal/push"
)

// A release that got no reply from its master (a timeout, a refused or
// reset connection) may have left the key there: the master may have
// applied the acquiring call, or may apply it late. Left alone, such a key
// of a lost attempt keeps the resource from every caller for a whole TTL
// (a burst of 100 callers on a loaded machine left no holder and five
// keys of five lost attempts for a minute). So the release is tried again
// in the background, by one goroutine per master that has releases to
// retry, one try each node timeout (only the oldest release is tried while
// the master gives no reply), until the master replies (the script ran: the
// key is released or was not ours) or the key's TTL since the retry was
// queued has passed:
// then Redis has let it go by itself. A reply to any other call to that
// master has them tried at once. Removals of fair queue entries that got
// no reply are retried the same way. Client.Close stops the retries and
// waits for them at most one node timeout.

// retryMax is the TTL assumed for a key whose TTL is not known.
const retryMax = time.Second

// maxRetries bounds the releases waiting for one master: beyond it the
// oldest is dropped (its key expires by itself), so that a master that is
// down while many locks are taken holds bounded memory.
const maxRetries = 4096

// retry is one release to try again on a master.
type retry struct {
	script *driver.Script
	keys   []string
	args   []any
	until  time.Time // on the client's monotonic clock: the key has expired by then
	res    string    // for the log
	id     uint64
}

// retries are the releases waiting for their masters, one list and at
// most one goroutine per master.
type retries struct {
	mu      sync.Mutex
	queued  [][]retry
	running []atomic.Bool   // written under mu; read without it by replied
	kick    []chan struct{} // a reply from the master: try now
	closed  bool
	ids     uint64
	stop    chan struct{}
	wg      sync.WaitGroup
}

func (r *retries) init(n int) {
	r.queued = make([][]retry, n)
	r.running = make([]atomic.Bool, n)
	r.kick = make([]chan struct{}, n)
	for i := range r.kick {
		r.kick[i] = make(chan struct{}, 1)
	}
	r.stop = make(chan struct{})
}

// retryRelease queues a release of l's keys on master i with script and
// args, to be tried again after its first try got no reply.
func (c *Client) retryRelease(l *Lock, i int, script *driver.Script, args []any) {
	c.retryScript(i, script, l.keys, args, l.ttl, l.resource)
}

// retryScript queues script on master i, for a key that expires within
// ttl (0: unknown, retryMax).
func (c *Client) retryScript(i int, script *driver.Script, keys []string, args []any, ttl time.Duration, res string) {
	if ttl <= 0 {
		ttl = retryMax
	}
	now, _ := c.clock.now()
	// The drift allowance: the master's clock may run slow against ours.
	until := now.Add(ttl + ttl/50 + c.cfg.nodeTimeout)
	rt := retry{script: script, keys: keys, args: args, until: until, res: res}
	r := &c.retries
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	if len(r.queued[i]) >= maxRetries {
		r.queued[i] = r.queued[i][1:]
	}
	r.ids++
	rt.id = r.ids
	r.queued[i] = append(r.queued[i], rt)
	if !r.running[i].Load() {
		r.running[i].Store(true)
		r.wg.Add(1)
		go c.retryLoop(i)
	}
}

// replied tells master i's retries that a call to it got a reply: the
// master answers again, and they are tried at once, not at the end of
// their backoff.
func (r *retries) replied(i int) {
	if r.running != nil && r.running[i].Load() {
		select {
		case r.kick[i] <- struct{}{}:
		default:
		}
	}
}

// retryLoop tries master i's queued releases until none is left, the
// client closes, or each has expired. It tries the oldest first: while
// that one gets no reply, the master is still out of reach, and the rest
// wait.
func (c *Client) retryLoop(i int) {
	r := &c.retries
	defer r.wg.Done()
	t := time.NewTimer(c.cfg.nodeTimeout)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		case <-r.kick[i]:
		}
		for {
			r.mu.Lock()
			now, _ := c.clock.now()
			q := r.queued[i]
			for len(q) > 0 && !now.Before(q[0].until) {
				q = q[1:] // expired on the master by now
			}
			r.queued[i] = q
			if len(q) == 0 || r.closed {
				r.running[i].Store(false)
				r.mu.Unlock()
				return
			}
			rt := q[0]
			r.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), c.cfg.nodeTimeout)
			_, err := c.masters[i].Eval(ctx, rt.script, rt.keys, rt.args...)
			cancel()
			if !driver.Replied(err) {
				c.cfg.logger.Debug("redlock: release retry got no reply", "master", c.addrs[i], "resource", rt.res, "err", err)
				break
			}
			r.mu.Lock()
			if q := r.queued[i]; len(q) > 0 && q[0].id == rt.id {
				r.queued[i] = q[1:]
			}
			r.mu.Unlock()
		}
		t.Reset(c.cfg.nodeTimeout)
	}
}

// close stops the retries and waits for their goroutines until by.
func (r *retries) close(by time.Time) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	close(r.stop)
	r.mu.Unlock()
	push.WaitBy(&r.wg, by)
}

// pendingReleases is how many releases wait to be tried again, for tests.
func (c *Client) pendingReleases() int {
	r := &c.retries
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, q := range r.queued {
		n += len(q)
	}
	return n
}
