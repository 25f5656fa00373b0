package redlock

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/internal/harness/memredis"
	"quorumlock.dev/redlock/internal/plain"
)

// Tests of the lock's own logic in virtual time: masters are in-memory
// servers (internal/harness/memredis, which runs the shipped scripts), inside a
// testing/synctest bubble, so that time moves only when every goroutine
// waits and no bound depends on the machine's speed.

// virtualClock is the client's clock in a bubble: the boot clock of the
// machine does not move there.
type virtualClock struct{}

func (virtualClock) now() (time.Time, time.Duration) {
	now := time.Now()
	return now, time.Duration(now.UnixNano())
}

// memMasters starts n in-memory masters; call it inside the bubble.
func memMasters(n int) ([]*memredis.Server, []Master) {
	servers := make([]*memredis.Server, n)
	masters := make([]Master, n)
	for i := range n {
		servers[i] = memredis.New()
		masters[i] = servers[i].Conn()
	}
	return servers, masters
}

// attemptCalls is how many acquiring calls for one key server s took: SET
// NX, and the probe script that a woken waiter's attempt sends its probe
// master instead (probeCall; memredis counts a script by its first line).
func attemptCalls(s *memredis.Server) int {
	first, _, _ := strings.Cut(plain.ProbeScript.Source(), "\n")
	return s.Calls("set") + s.Calls(first)
}

// virtualClient is a client of masters with the virtual clock; Close at
// the end of the bubble.
func virtualClient(t *testing.T, masters []Master, opts ...Option) *Client {
	t.Helper()
	c, err := New(masters, opts...)
	require.NoError(t, err)
	c.clock = virtualClock{}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestVirtualLockUnlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		servers, masters := memMasters(3)
		c := virtualClient(t, masters)
		ctx := context.Background()
		l, err := c.TryLock(ctx, "job", time.Minute)
		require.NoError(t, err)
		synctest.Wait() // the round returned at a majority; the last SET lands now
		for _, s := range servers {
			v, ok := s.Get("lock:job")
			assert.True(t, ok)
			assert.Equal(t, l.token, v)
			assert.Equal(t, time.Minute, s.TTL("lock:job"))
		}
		_, err = c.TryLock(ctx, "job", time.Minute)
		assert.ErrorIs(t, err, ErrNotAcquired)
		require.NoError(t, l.Unlock(ctx))
		synctest.Wait()
		for _, s := range servers {
			_, ok := s.Get("lock:job")
			assert.False(t, ok)
		}
	})
}

// TestVirtualWaitDeadHolder: a Lock that waits on a holder that never
// releases (a key set by hand) wins exactly when the
// holder's keys expire, woken by its expiry timer, not a poll.
func TestVirtualWaitDeadHolder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		servers, masters := memMasters(3)
		for _, s := range servers {
			s.Set("lock:job", "dead-holder", 3*time.Second)
		}
		c := virtualClient(t, masters)
		start := time.Now()
		l, err := c.Lock(context.Background(), "job", time.Minute)
		require.NoError(t, err)
		waited := time.Since(start)
		assert.GreaterOrEqual(t, waited, 3*time.Second)
		assert.Less(t, waited, 3*time.Second+50*time.Millisecond, "woken late")
		assert.LessOrEqual(t, attemptCalls(servers[0]), 4, "more than 4 attempts: Lock polled")
		require.NoError(t, l.Unlock(context.Background()))
	})
}

// A release wakes a waiter at once, through PUBLISH.
func TestVirtualPushWakeUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, masters := memMasters(3)
		holder := virtualClient(t, masters)
		waiter := virtualClient(t, masters)
		ctx := context.Background()
		h, err := holder.TryLock(ctx, "job", time.Minute)
		require.NoError(t, err)
		got := make(chan time.Time, 1)
		go func() {
			l, err := waiter.Lock(ctx, "job", time.Minute)
			if err == nil {
				got <- time.Now()
				_ = l.Unlock(ctx)
			}
			close(got)
		}()
		time.Sleep(time.Second)
		synctest.Wait()
		released := time.Now()
		require.NoError(t, h.Unlock(ctx))
		at, ok := <-got
		require.True(t, ok, "the waiter did not win")
		assert.Less(t, at.Sub(released), 10*time.Millisecond, "the waiter was not woken by the release")
	})
}

// TestCheckHungMasterVirtual: Check gives a master that never answers one
// node timeout for INFO and one for the first CONFIG GET, reports it
// unreachable, and reads the others; the calls it gave up on end later
// without touching the report (the race detector watches).
func TestCheckHungMasterVirtual(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		servers, masters := memMasters(3)
		c := virtualClient(t, masters, WithNodeTimeout(100*time.Millisecond))
		servers[2].Hang()
		start := time.Now()
		rep, err := c.Check(context.Background())
		require.NoError(t, err)
		assert.Equal(t, 200*time.Millisecond, time.Since(start), "not bounded by two node timeouts")
		assert.False(t, rep.Masters[2].Reachable())
		assert.True(t, rep.Masters[0].Reachable())
		assert.True(t, rep.Masters[1].Reachable())
		servers[2].Resume()
	})
}

// TestVirtualVotesSplit: an attempt that wins some masters but not a
// majority says that the votes split; one that wins none does not.
func TestVirtualVotesSplit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		servers, masters := memMasters(3)
		c := virtualClient(t, masters)
		ctx := context.Background()
		servers[0].Set("lock:split", "a", time.Minute)
		servers[2].Set("lock:split", "b", time.Minute)
		_, err := c.TryLock(ctx, "split", time.Minute)
		assert.ErrorIs(t, err, ErrNotAcquired)
		assert.ErrorIs(t, err, ErrVotesSplit)
		synctest.Wait()
		_, ok := servers[1].Get("lock:split")
		assert.False(t, ok, "the key won on the minority is released")

		servers[1].Set("lock:split", "a", time.Minute)
		_, err = c.TryLock(ctx, "split", time.Minute)
		assert.ErrorIs(t, err, ErrNotAcquired)
		assert.NotErrorIs(t, err, ErrVotesSplit)
	})
}
