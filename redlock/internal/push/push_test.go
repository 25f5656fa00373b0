package push

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"quorumlock.dev/driver"
)

// recordingConn is a master whose subscription records its SUBSCRIBE
// commands and answers each PING with its pong.
type recordingConn struct {
	driver.Conn
	sub *recordingSub
}

func (c recordingConn) Subscribe(context.Context) driver.Subscription { return c.sub }

type recordingSub struct {
	mu    sync.Mutex
	subs  [][]string
	pongs chan string
	done  chan struct{}
	lose  chan struct{} // a receive from it loses the connection; nil: never
	fails int           // SUBSCRIBE commands still to fail (a master that refuses connections)
}

func (s *recordingSub) Subscribe(_ context.Context, channels ...string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fails > 0 {
		s.fails--
		return errors.New("connection refused")
	}
	ch := slices.Clone(channels)
	slices.Sort(ch)
	s.subs = append(s.subs, ch)
	return nil
}

func (s *recordingSub) Unsubscribe(context.Context, ...string) error { return nil }

func (s *recordingSub) Ping(_ context.Context, payload string) error {
	s.pongs <- payload
	return nil
}

func (s *recordingSub) Receive(context.Context) (driver.Push, error) {
	select {
	case p := <-s.pongs:
		return driver.Push{Pong: true, Payload: p}, nil
	case <-s.lose:
		return driver.Push{}, errors.New("connection reset by restart")
	case <-s.done:
		return driver.Push{}, context.Canceled
	}
}

func (s *recordingSub) Close() error {
	close(s.done)
	return nil
}

// TestJoinQueuedSubscribesOnce: a queued waiter's key channel and handoff
// channel go out in one SUBSCRIBE, whenever the subscription's writer
// runs. Joined one after the other, they go out in one or two, as the
// writer ran in between (two here, where it runs between them): the
// simulator's replays of a seed parted there.
func TestJoinQueuedSubscribesOnce(t *testing.T) {
	for _, queued := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			sub := &recordingSub{pongs: make(chan string, 8), done: make(chan struct{})}
			h := NewHub([]driver.Conn{recordingConn{sub: sub}}, []string{"m0"}, slog.New(slog.DiscardHandler))
			handoffs := HandoffChannel("lock:k", "tag")
			var w *Waiter
			if queued {
				w = h.JoinQueued("lock:k", handoffs)
			} else {
				w = h.JoinQueued("lock:k", "") // its handoff channel not known yet
				synctest.Wait()                // the writer sends what it has
				w.SetID("me", 1, 1, handoffs)
			}
			synctest.Wait()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if !w.Listening(ctx, 1, time.Second) {
				t.Fatal("the subscription was never confirmed")
			}
			w.Leave()
			h.Close(time.Now().Add(time.Second))
			sub.mu.Lock()
			defer sub.mu.Unlock()
			want := [][]string{{"lock:k", handoffs}}
			if !queued {
				want = [][]string{{"lock:k"}, {handoffs}}
			}
			if !slices.EqualFunc(sub.subs, want, slices.Equal[[]string]) {
				t.Errorf("queued %v: SUBSCRIBE commands %q, want %q", queued, sub.subs, want)
			}
		})
	}
}

// listeningOn is a waiter on "lock:k" of a hub over one master whose
// subscription is sub, once its subscription is confirmed; the hub is
// closed and the waiter leaves when t's bubble ends.
func listeningOn(t *testing.T, sub *recordingSub) *Waiter {
	t.Helper()
	h := NewHub([]driver.Conn{recordingConn{sub: sub}}, []string{"m0"}, slog.New(slog.DiscardHandler))
	t.Cleanup(func() { h.Close(time.Now().Add(time.Second)) })
	w := h.Join("lock:k")
	t.Cleanup(w.Leave)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if !w.Listening(ctx, 1, time.Second) {
		t.Fatal("the subscription was never confirmed")
	}
	return w
}

// TestLostConnectionResubscribes: after its subscription's connection was
// lost, the hub subscribes its channels again on the next one: the driver
// seam does not promise that a new connection has them (go-redis
// resubscribes when it redials; memredis, like a master that restarted,
// does not), and a waiter that believed itself subscribed would wait out
// a TTL for a release it never hears (found by the simulator, seed
// 1520286547789764567: a master's restart).
func TestLostConnectionResubscribes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sub := &recordingSub{pongs: make(chan string, 8), done: make(chan struct{}), lose: make(chan struct{}, 1)}
		w := listeningOn(t, sub)
		sub.lose <- struct{}{}
		synctest.Wait()
		if w.ListeningAt(0) {
			t.Error("listening right after the connection was lost")
		}
		time.Sleep(time.Second) // past the hub's back-off
		synctest.Wait()
		if !w.ListeningAt(0) {
			t.Error("not listening again after the connection came back")
		}
		sub.mu.Lock()
		defer sub.mu.Unlock()
		both := []string{"lock:k", HandedChannel("lock:k")}
		if want := [][]string{both, both}; !slices.EqualFunc(sub.subs, want, slices.Equal[[]string]) {
			t.Errorf("SUBSCRIBE commands %q, want %q: the channels again after the loss", sub.subs, want)
		}
	})
}

// TestFailedSubscribeIsSentAgain: a SUBSCRIBE whose write failed (its
// master refused connections) is sent again, and only the PING after one
// that went through confirms the channel. The failed batch used to keep
// its number, so the next PING's pong confirmed a channel never
// subscribed, and a waiter slept until its timer through the releases
// published there (found by the simulator: a crowd whose master was down
// as it began, seed 1149748299890102350).
func TestFailedSubscribeIsSentAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sub := &recordingSub{pongs: make(chan string, 8), done: make(chan struct{}), fails: 1}
		listeningOn(t, sub)
		sub.mu.Lock()
		defer sub.mu.Unlock()
		if want := [][]string{{"lock:k", HandedChannel("lock:k")}}; !slices.EqualFunc(sub.subs, want, slices.Equal[[]string]) {
			t.Errorf("SUBSCRIBE commands that went through %q, want %q: confirmed without one", sub.subs, want)
		}
	})
}
