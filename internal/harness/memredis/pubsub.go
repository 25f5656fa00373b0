package memredis

import (
	"context"
	"errors"
	"sync"

	"quorumlock.dev/driver"
)

// errReset is what a subscription reports once after its server restarted.
var errReset = errors.New("memredis: connection reset by restart")

// errClosed is Receive's error after Close.
var errClosed = errors.New("memredis: subscription closed")

func (c conn) Subscribe(context.Context) driver.Subscription {
	sub := &subscription{s: c.s, chans: make(map[string]bool), notify: make(chan struct{}, 1), done: make(chan struct{})}
	c.s.mu.Lock()
	c.s.subs[sub] = struct{}{}
	c.s.mu.Unlock()
	return sub
}

// subscription is one subscribed connection.
type subscription struct {
	s      *Server
	notify chan struct{} // cap 1: something queued, or the connection reset
	done   chan struct{} // closed by Close

	mu     sync.Mutex
	chans  map[string]bool
	queue  []driver.Push
	reset_ bool // the server restarted: the next Receive says so
	closed bool
}

func (sub *subscription) Subscribe(ctx context.Context, channels ...string) error {
	return sub.write(ctx, func() {
		for _, ch := range channels {
			sub.chans[ch] = true
		}
	})
}

func (sub *subscription) Unsubscribe(ctx context.Context, channels ...string) error {
	return sub.write(ctx, func() {
		for _, ch := range channels {
			delete(sub.chans, ch)
		}
	})
}

func (sub *subscription) Ping(ctx context.Context, payload string) error {
	return sub.write(ctx, func() {
		sub.push(driver.Push{Pong: true, Payload: payload})
	})
}

// write runs f as a command on the server, which may hang or fail.
func (sub *subscription) write(ctx context.Context, f func()) error {
	if err := sub.s.enter(ctx); err != nil {
		return err
	}
	defer sub.s.mu.Unlock()
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if sub.closed {
		return errClosed
	}
	f()
	return nil
}

// push queues p; sub.mu is held.
func (sub *subscription) push(p driver.Push) {
	sub.queue = append(sub.queue, p)
	select {
	case sub.notify <- struct{}{}:
	default:
	}
}

// deliver queues a message on a channel the subscription listens to;
// s.mu is held.
func (sub *subscription) deliver(channel, payload string) bool {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if !sub.chans[channel] || sub.closed {
		return false
	}
	sub.push(driver.Push{Channel: channel, Payload: payload})
	return true
}

// reset drops the channels after a restart; s.mu is held.
func (sub *subscription) reset() {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	clear(sub.chans)
	sub.queue = nil
	sub.reset_ = true
	select {
	case sub.notify <- struct{}{}:
	default:
	}
}

func (sub *subscription) Receive(ctx context.Context) (driver.Push, error) {
	for {
		sub.mu.Lock()
		switch {
		case sub.closed:
			sub.mu.Unlock()
			return driver.Push{}, errClosed
		case sub.reset_:
			sub.reset_ = false
			sub.mu.Unlock()
			return driver.Push{}, errReset
		case len(sub.queue) > 0:
			p := sub.queue[0]
			sub.queue = sub.queue[1:]
			sub.mu.Unlock()
			return p, nil
		}
		sub.mu.Unlock()
		select {
		case <-sub.notify:
		case <-sub.done:
		case <-ctx.Done():
			return driver.Push{}, ctx.Err()
		}
	}
}

func (sub *subscription) Close() error {
	sub.s.mu.Lock()
	delete(sub.s.subs, sub)
	sub.s.mu.Unlock()
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if !sub.closed {
		sub.closed = true
		close(sub.done)
	}
	return nil
}
