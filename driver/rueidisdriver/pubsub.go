package rueidisdriver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/redis/rueidis"

	"quorumlock.dev/driver"
)

// errLost is a subscription connection that closed without saying why.
var errLost = errors.New("rueidisdriver: subscription connection lost")

type subConn struct{ conn }

// Subscribe returns a subscription whose connection is taken from the
// client's pool (Dedicate) at its first call.
func (a subConn) Subscribe(context.Context) driver.Subscription {
	return &subscription{c: a.c, channels: map[string]bool{}, wake: make(chan struct{}, 1), closed: make(chan struct{})}
}

// subscription is a dedicated connection with pub/sub hooks. Messages are
// queued by rueidis's reader as they arrive; a pong is queued when its
// PING's reply has come, so every message the server sent before it is
// ahead of it (one sent just after it may be too).
type subscription struct {
	c rueidis.Client
	// channels is what the writer subscribed to, for a new connection.
	// Only the writer's calls use it.
	channels map[string]bool

	wake      chan struct{} // a push queued or a new session
	closed    chan struct{}
	closeOnce sync.Once

	mu    sync.Mutex
	sess  *session // nil before the first call, after a loss and after Close
	queue []driver.Push
	done  bool // Close was called
}

// session is one dedicated connection.
type session struct {
	dc      rueidis.DedicatedClient
	release func()
	lost    <-chan error // gets the reason the hooks ended, then closes
}

func (s *subscription) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *subscription) push(p driver.Push) {
	s.mu.Lock()
	s.queue = append(s.queue, p)
	s.mu.Unlock()
	s.signal()
}

// session returns the current connection, taking a new one and
// subscribing it again after a loss.
func (s *subscription) session(ctx context.Context) (*session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	sess, done := s.sess, s.done
	s.mu.Unlock()
	if done {
		return nil, net.ErrClosed
	}
	if sess != nil {
		return sess, nil
	}
	dc, release := s.c.Dedicate() // a failed dial shows in the first Do
	sess = &session{dc: dc, release: release}
	sess.lost = dc.SetPubSubHooks(rueidis.PubSubHooks{
		OnMessage: func(m rueidis.PubSubMessage) {
			s.push(driver.Push{Channel: m.Channel, Payload: m.Message})
		},
	})
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		release()
		return nil, net.ErrClosed
	}
	s.sess = sess
	s.mu.Unlock()
	s.signal() // a waiting Receive watches the new connection
	if len(s.channels) > 0 {
		chans := make([]string, 0, len(s.channels))
		for ch := range s.channels {
			chans = append(chans, ch)
		}
		if err := s.do(ctx, sess, dc.B().Subscribe().Channel(chans...).Build()); err != nil {
			return nil, err
		}
	}
	return sess, nil
}

// do sends cmd on sess; a failure without a reply ends sess.
func (s *subscription) do(ctx context.Context, sess *session, cmd rueidis.Completed) error {
	err := sess.dc.Do(ctx, cmd).Error()
	if err != nil && !driver.Replied(convert(err)) {
		s.drop(sess)
	}
	return convert(err)
}

// drop forgets sess if it is current and returns its connection.
func (s *subscription) drop(sess *session) {
	s.mu.Lock()
	current := s.sess == sess
	if current {
		s.sess = nil
	}
	s.mu.Unlock()
	if current {
		sess.release()
	}
}

func (s *subscription) Subscribe(ctx context.Context, channels ...string) error {
	sess, err := s.session(ctx)
	if err != nil {
		return err
	}
	for _, ch := range channels {
		s.channels[ch] = true
	}
	return s.do(ctx, sess, sess.dc.B().Subscribe().Channel(channels...).Build())
}

func (s *subscription) Unsubscribe(ctx context.Context, channels ...string) error {
	for _, ch := range channels {
		delete(s.channels, ch)
	}
	sess, err := s.session(ctx)
	if err != nil {
		return err
	}
	return s.do(ctx, sess, sess.dc.B().Unsubscribe().Channel(channels...).Build())
}

func (s *subscription) Ping(ctx context.Context, payload string) error {
	sess, err := s.session(ctx)
	if err != nil {
		return err
	}
	msg, err := sess.dc.Do(ctx, sess.dc.B().Ping().Message(payload).Build()).ToMessage()
	if err != nil {
		if !driver.Replied(convert(err)) {
			s.drop(sess)
		}
		return convert(err)
	}
	// RESP3 answers with the payload; RESP2 in subscribed mode with
	// ["pong", payload].
	if arr, aerr := msg.AsStrSlice(); aerr == nil && len(arr) == 2 && arr[0] == "pong" {
		s.push(driver.Push{Pong: true, Payload: arr[1]})
		return nil
	}
	got, serr := msg.ToString()
	if serr != nil || got != payload {
		return unexpected("PING", msg)
	}
	s.push(driver.Push{Pong: true, Payload: payload})
	return nil
}

func (s *subscription) Receive(ctx context.Context) (driver.Push, error) {
	for {
		s.mu.Lock()
		if len(s.queue) > 0 {
			p := s.queue[0]
			s.queue[0] = driver.Push{}
			s.queue = s.queue[1:]
			s.mu.Unlock()
			return p, nil
		}
		sess := s.sess
		s.mu.Unlock()
		var lost <-chan error
		if sess != nil {
			lost = sess.lost
		}
		select {
		case <-s.wake:
		case err, ok := <-lost:
			s.drop(sess)
			if !ok || err == nil {
				err = errLost
			}
			return driver.Push{}, fmt.Errorf("rueidisdriver: subscription: %w", err)
		case <-s.closed:
			return driver.Push{}, net.ErrClosed
		case <-ctx.Done():
			return driver.Push{}, ctx.Err()
		}
	}
}

// Close ends a Receive that waits at once. It returns the connection to the
// client's pool, which unsubscribes it first: on a server that hangs, that
// takes until ConnWriteTimeout closes the connection.
func (s *subscription) Close() error {
	s.closeOnce.Do(func() {
		close(s.closed)
		s.mu.Lock()
		s.done = true
		sess := s.sess
		s.sess = nil
		s.mu.Unlock()
		if sess != nil {
			sess.release()
		}
	})
	return nil
}
