package redlock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"quorumlock.dev/driver"
)

// A Client's first calls to a master open its connections, and on a busy
// machine that set-up (a dial, a handshake of several round trips) can eat
// the node timeout that bounds a vote: eight new Clients bursting on one
// resource at once failed most of their calls as "did not answer in time"
// with no key set anywhere. So New opens a connection to each master in
// the background (one read-only call), bounded by warmBound, and an
// acquisition that starts before a majority of them answered waits for
// them first, at most warmBound and its context. The wait is before the
// round: the lease counts from the round's start, as always.

// warmBound bounds the first call to each master, and what an acquisition
// waits for it.
const warmBound = time.Second

// warmScript is the first call: it reads and writes nothing. Its key
// routes it on a cluster.
var warmScript = driver.NewScript("-- quorumlock: open a connection\nreturn 0")

const warmKey = "lock:quorumlock:warm-up"

// warmup is the state of the first calls: ok is closed once a majority of
// masters answered them (or every call ended); ready is set once an
// acquisition no longer needs to look.
type warmup struct {
	ok     chan struct{}
	ready  atomic.Bool
	cancel context.CancelFunc
}

// startWarmup opens a connection to every master in the background.
func (c *Client) startWarmup() {
	w := &c.warm
	w.ok = make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), warmBound)
	w.cancel = cancel
	var once sync.Once
	var answered, ended atomic.Int32
	for _, m := range c.masters {
		c.background(func() {
			_, err := m.Eval(ctx, warmScript, []string{warmKey})
			if driver.Replied(err) && int(answered.Add(1)) == c.quorum {
				once.Do(func() { close(w.ok) })
			}
			if int(ended.Add(1)) == len(c.masters) {
				once.Do(func() { close(w.ok) })
				cancel()
			}
		})
	}
}

// warmed waits, before an acquisition of a new Client, until a majority of
// masters answered their first calls (or every one ended), at most
// warmBound and until ctx ends.
func (c *Client) warmed(ctx context.Context) {
	w := &c.warm
	if w.ok == nil || w.ready.Load() {
		return
	}
	t := time.NewTimer(warmBound)
	defer t.Stop()
	select {
	case <-w.ok:
	case <-t.C:
	case <-ctx.Done():
		return
	}
	w.ready.Store(true)
}

// stopWarmup ends the first calls still out (Close, which then waits for
// them to return).
func (c *Client) stopWarmup() {
	if c.warm.cancel != nil {
		c.warm.cancel()
	}
}
