package retry

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/driver"
)

var script = driver.NewScript("return 1")

// master is a fake master: its calls get no reply while down, and hang
// while hung; it logs every try, by the first key.
type master struct {
	mu    sync.Mutex
	down  bool
	hung  bool
	tries []string
}

func (m *master) try(ctx context.Context, _ int, _ *driver.Script, keys []string, _ []any) error {
	m.mu.Lock()
	m.tries = append(m.tries, keys[0])
	down, hung := m.down, m.hung
	m.mu.Unlock()
	switch {
	case hung:
		<-ctx.Done()
		return ctx.Err()
	case down:
		return errors.New("connection refused") // no reply
	}
	return nil
}

func (m *master) set(down, hung bool) {
	m.mu.Lock()
	m.down, m.hung = down, hung
	m.mu.Unlock()
}

func (m *master) log() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.tries...)
}

const interval = 50 * time.Millisecond

func newQueue(m *master) *Queue {
	return New(1, m.try, time.Now, interval, nil)
}

// A call is tried once each interval, only the oldest while the master
// gives no reply, and every queued call once it replies; then the queue
// is empty and its goroutine has ended.
func TestRetriedUntilReply(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &master{down: true}
		q := newQueue(m)
		q.Add(0, script, []string{"a"}, nil, time.Minute, "a")
		q.Add(0, script, []string{"b"}, nil, time.Minute, "b")
		time.Sleep(3*interval + time.Millisecond)
		assert.Equal(t, []string{"a", "a", "a"}, m.log(), "the oldest alone while no reply comes")
		assert.Equal(t, 2, q.Pending())
		m.set(false, false)
		time.Sleep(interval)
		synctest.Wait()
		assert.Equal(t, []string{"a", "a", "a", "a", "b"}, m.log())
		assert.Zero(t, q.Pending())
		time.Sleep(10 * interval)
		synctest.Wait()
		assert.Len(t, m.log(), 5, "tried after the queue was empty")
		q.Close(time.Now())
	})
}

// A reply to another call (Replied) has the calls tried at once, not at
// the end of the interval.
func TestRepliedTriesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &master{down: true}
		q := newQueue(m)
		q.Add(0, script, []string{"a"}, nil, time.Minute, "a")
		time.Sleep(interval + time.Millisecond) // first retry: no reply
		m.set(false, false)
		time.Sleep(interval / 10)
		q.Replied(0)
		synctest.Wait()
		assert.Zero(t, q.Pending(), "not tried when the master replied to another call")
		assert.Len(t, m.log(), 2)
		q.Close(time.Now())
	})
}

// A call whose key has expired (its TTL, 2% and an interval since it was
// queued) is dropped without another try.
func TestExpiredDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &master{down: true}
		q := newQueue(m)
		const ttl = 200 * time.Millisecond
		q.Add(0, script, []string{"a"}, nil, ttl, "a")
		time.Sleep(ttl + ttl/50 + interval + 2*interval)
		synctest.Wait()
		assert.Zero(t, q.Pending())
		n := len(m.log())
		assert.LessOrEqual(t, n, 5, "tried past the key's expiry")
		time.Sleep(5 * interval)
		synctest.Wait()
		assert.Len(t, m.log(), n, "the goroutine went on trying")
		q.Close(time.Now())
	})
}

// A master holds at most Max calls: beyond, the oldest is dropped.
func TestBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &master{down: true}
		q := newQueue(m)
		for range Max + 10 {
			q.Add(0, script, []string{"k"}, nil, time.Minute, "k")
		}
		assert.Equal(t, Max, q.Pending())
		q.Close(time.Now())
	})
}

// Close stops the retries and returns by its bound even while a try hangs
// on the master; Add after Close queues nothing.
func TestCloseBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &master{hung: true}
		q := newQueue(m)
		q.Add(0, script, []string{"a"}, nil, time.Minute, "a")
		time.Sleep(interval + time.Millisecond) // a try is in flight, hung
		start := time.Now()
		q.Close(start.Add(interval / 2))
		assert.Equal(t, interval/2, time.Since(start), "Close did not return at its bound")
		q.Add(0, script, []string{"b"}, nil, time.Minute, "b")
		assert.Equal(t, 1, q.Pending())
		var tries atomic.Int32
		tries.Store(int32(len(m.log())))
		time.Sleep(10 * interval)
		synctest.Wait()
		assert.Equal(t, tries.Load(), int32(len(m.log())), "tried after Close")
		q.Close(time.Now()) // idempotent
	})
}

// failed hears of each retry that got no reply, with the call's name.
func TestFailedReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &master{down: true}
		var got []string
		var mu sync.Mutex
		q := New(1, m.try, time.Now, interval, func(i int, what string, err error) {
			mu.Lock()
			got = append(got, what)
			mu.Unlock()
			require.Error(t, err)
		})
		q.Add(0, script, []string{"a"}, nil, time.Minute, "job")
		time.Sleep(2*interval + time.Millisecond)
		mu.Lock()
		assert.Equal(t, []string{"job", "job"}, got)
		mu.Unlock()
		q.Close(time.Now())
	})
}
