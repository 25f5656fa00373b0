package redlock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/internal/harness/memredis"
)

// The renewer of Lock.Renew in virtual time: every bound below is exact,
// whatever the machine's load.

// renewWorld is three in-memory masters and a client that records what its
// observer is told; make it inside the bubble.
type renewWorld struct {
	servers []*memredis.Server
	client  *Client
	obs     *recorder
}

func newRenewWorld(t *testing.T) renewWorld {
	servers, masters := memMasters(3)
	obs := &recorder{}
	return renewWorld{servers: servers, client: virtualClient(t, masters, WithHooks(hooksOf(obs))), obs: obs}
}

// holding counts the masters whose key holds l's token, once every call
// in flight has landed.
func (w renewWorld) holding(l *Lock) int {
	synctest.Wait()
	n := 0
	for _, s := range w.servers {
		if v, ok := s.Get(l.key); ok && v == l.Token() {
			n++
		}
	}
	return n
}

// lead is when the renewer of a lock on ttl checks: this long before Until.
func (w renewWorld) lead(ttl time.Duration) time.Duration {
	lease := w.client.lease(ttl)
	return max(lease/3, 2*w.client.cfg.nodeTimeout)
}

// ended waits, at most a virtual minute, for ctx to end, and returns when.
func ended(t *testing.T, ctx context.Context) time.Time {
	t.Helper()
	select {
	case <-ctx.Done():
		return time.Now()
	case <-time.After(time.Minute):
		t.Fatal("the lock's context did not end")
		return time.Time{}
	}
}

// progressing calls l.Progress every period until stop.
func progressing(l *Lock, period time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tk := time.NewTicker(period)
		defer tk.Stop()
		for {
			select {
			case <-done:
				return
			case <-tk.C:
				l.Progress()
			}
		}
	})
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}

// progressingHolder takes "job" for ttl with w's client, reports progress
// every 20 ms until the test ends, and starts a renewer with maxHold.
func (w renewWorld) progressingHolder(t *testing.T, ttl, maxHold time.Duration) *Lock {
	t.Helper()
	l, err := w.client.TryLock(context.Background(), "job", ttl)
	require.NoError(t, err)
	t.Cleanup(progressing(l, 20*time.Millisecond))
	require.NoError(t, l.Renew(ttl, maxHold))
	return l
}

// toldOnce checks that the hook heard of exactly one failure, reason.
func (w renewWorld) toldOnce(t *testing.T, reason error) {
	t.Helper()
	told := w.obs.told()
	require.Len(t, told, 1)
	assert.ErrorIs(t, told[0], reason)
}

func TestRenewVirtual(t *testing.T) {
	ctx := context.Background()
	t.Run("a paused process is told its lease ran out, not that its work stood still", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			w := newRenewWorld(t)
			var paused atomic.Int64
			w.client.clock = pausedClock{&paused}
			ttl := 10 * time.Second
			l, err := w.client.TryLock(ctx, "job", ttl)
			require.NoError(t, err)
			done := l.Done() // the lease's timer checks at 0 + k s
			time.Sleep(500 * time.Millisecond)
			require.NoError(t, l.Renew(ttl, time.Minute)) // the renewer at 0.5 + k s
			time.Sleep(700 * time.Millisecond)
			// SIGSTOP for 20 s, seen first by the renewer at 1.5 s: the
			// lease's timer looks next at 2 s.
			paused.Store(int64(20 * time.Second))
			<-done
			cause := context.Cause(l.Context())
			assert.ErrorIs(t, cause, ErrLockLost)
			assert.NotErrorIs(t, cause, ErrNoProgress, "a pause was blamed on the work loop")
			assert.Equal(t, errLeaseRanOut, cause)
			w.toldOnce(t, errLeaseRanOut)
		})
	})
	t.Run("a stalled worker loses the lock at the first check", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			w := newRenewWorld(t)
			ttl := 1500 * time.Millisecond
			l, err := w.client.TryLock(ctx, "job", ttl)
			require.NoError(t, err)
			until := l.Until()
			require.NoError(t, l.Renew(ttl, time.Minute))
			lost := ended(t, l.Context())
			assert.Equal(t, until.Add(-w.lead(ttl)), lost, "not lost at the renewer's check")
			cause := context.Cause(l.Context())
			assert.ErrorIs(t, cause, ErrLockLost)
			assert.ErrorIs(t, cause, ErrNoProgress)
			told := w.obs.told()
			require.Len(t, told, 1, "the observer hears of the failure before the context ends")
			assert.ErrorIs(t, told[0], ErrNoProgress)
			assert.Zero(t, w.holding(l), "the renewer did not free the masters")
			assert.ErrorIs(t, l.Unlock(ctx), ErrLockNotHeld)
		})
	})
	t.Run("a progressing worker keeps it over many TTLs", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			w := newRenewWorld(t)
			ttl := 300 * time.Millisecond
			l, err := w.client.TryLock(ctx, "job", ttl)
			require.NoError(t, err)
			first := l.Until()
			stop := progressing(l, 20*time.Millisecond)
			require.NoError(t, l.Renew(ttl, time.Minute))
			time.Sleep(20 * ttl)
			select {
			case <-l.Context().Done():
				t.Fatalf("lost while progressing: %v", context.Cause(l.Context()))
			default:
			}
			assert.Greater(t, l.Until().Sub(first), 19*ttl, "not extended each time")
			assert.Equal(t, 3, w.holding(l))
			stop()
			require.NoError(t, l.Unlock(ctx))
			assert.Empty(t, w.obs.told())
			assertStopped(t, l)
		})
	})
	t.Run("keys deleted behind its back: Extend fails at the check", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			w := newRenewWorld(t)
			ttl := 300 * time.Millisecond
			l := w.progressingHolder(t, ttl, time.Minute)
			until := l.Until()
			synctest.Wait()
			for _, s := range w.servers {
				s.Del(l.key)
			}
			lost := ended(t, l.Context())
			assert.Equal(t, until.Add(-w.lead(ttl)), lost)
			cause := context.Cause(l.Context())
			assert.ErrorIs(t, cause, ErrLockLost)
			assert.ErrorIs(t, cause, ErrLockNotHeld, "the cause carries Extend's error")
			w.toldOnce(t, ErrLockNotHeld)
		})
	})
	t.Run("max hold ends it", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			w := newRenewWorld(t)
			ttl := 300 * time.Millisecond
			start, maxHold := time.Now(), 700*time.Millisecond
			l := w.progressingHolder(t, ttl, maxHold)
			firstCheck := l.Until().Add(-w.lead(ttl))
			lost := ended(t, l.Context())
			assert.ErrorIs(t, context.Cause(l.Context()), ErrMaxHold)
			assert.True(t, lost.After(firstCheck), "never extended before max hold")
			assert.False(t, lost.After(start.Add(maxHold)), "held past the maximum")
			w.toldOnce(t, ErrMaxHold)
			assert.Zero(t, w.holding(l))
		})
	})
	t.Run("two of three masters down: the next extension ends it", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			w := newRenewWorld(t)
			ttl := 300 * time.Millisecond
			l := w.progressingHolder(t, ttl, time.Minute)
			until := l.Until()
			for _, s := range w.servers[:2] {
				s.Fail(memredis.ErrDown)
			}
			lost := ended(t, l.Context())
			assert.Equal(t, until.Add(-w.lead(ttl)), lost)
			assert.ErrorIs(t, context.Cause(l.Context()), ErrLockLost)
			assert.ErrorIs(t, context.Cause(l.Context()), ErrQuorumUnavailable)
			require.Len(t, w.obs.told(), 1)
		})
	})
	t.Run("Do returns fn's error joined with the loss, told once", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			w := newRenewWorld(t)
			ttl := 300 * time.Millisecond
			stalled := errors.New("stalled")
			err := w.client.Do(ctx, "job", ttl, func(ctx context.Context, l *Lock) error {
				require.NoError(t, l.Renew(ttl, time.Minute))
				ended(t, ctx)
				return stalled
			})
			assert.ErrorIs(t, err, stalled)
			assert.ErrorIs(t, err, ErrLockLost)
			assert.ErrorIs(t, err, ErrNoProgress)
			assert.Equal(t, 1, strings.Count(err.Error(), ErrLockLost.Error()), "the loss is told once: %v", err)

			err = w.client.Do(ctx, "job2", ttl, func(ctx context.Context, l *Lock) error {
				require.NoError(t, l.Renew(ttl, time.Minute))
				ended(t, ctx)
				return context.Cause(ctx)
			})
			assert.ErrorIs(t, err, ErrNoProgress)
			assert.Equal(t, 1, strings.Count(err.Error(), ErrLockLost.Error()), "the loss is told once: %v", err)
		})
	})
}

// TestRenewUnlockRaceVirtual: Unlock at every millisecond around the
// renewer's check, the check's own instant included (where the two run at
// the same virtual moment, in either order): Unlock wins, the renewer
// stops quietly, and nothing is reported as failed.
func TestRenewUnlockRaceVirtual(t *testing.T) {
	for i := range 21 {
		synctest.Test(t, func(t *testing.T) {
			w := newRenewWorld(t)
			ttl := 300 * time.Millisecond
			l, err := w.client.TryLock(context.Background(), "job", ttl)
			require.NoError(t, err)
			require.NoError(t, l.Renew(ttl, time.Minute))
			l.Progress()
			check := l.Until().Add(-w.lead(ttl))
			time.Sleep(time.Until(check.Add(time.Duration(i-10) * time.Millisecond)))
			require.NoError(t, l.Unlock(context.Background()), "unlock %d ms from the check", i-10)
			assertStopped(t, l)
			assert.Empty(t, w.obs.told())
			assert.Zero(t, w.holding(l))
		})
	}
}

// An Unlock that comes while the renewer's Extend waits for the masters
// waits for that Extend on a channel, not on a sync.Mutex: a goroutine
// blocked on a mutex is not durably blocked in a synctest bubble, so the
// bubble's clock stopped and the Extend's calls never timed out (the
// simulator hung on it, one schedule in about 300). The bubble runs beside
// a real-time watchdog: without the fix synctest.Test never returns.
func TestUnlockBehindRenewerVirtual(t *testing.T) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		synctest.Test(t, func(t *testing.T) {
			w := newRenewWorld(t)
			ctx := context.Background()
			const ttl = time.Second
			l, err := w.client.TryLock(ctx, "renew-unlock", ttl)
			require.NoError(t, err)
			require.NoError(t, l.Renew(ttl, time.Minute))
			l.Progress()
			// Just before the renewer's Extend: the masters stop answering
			// (their calls wait for the node timeout), and Unlock arrives
			// while that Extend is in flight.
			time.Sleep(time.Until(l.Until()) - w.lead(ttl) - time.Millisecond)
			for _, s := range w.servers {
				s.Hang()
			}
			time.Sleep(2 * time.Millisecond)
			unlocked := make(chan error, 1)
			go func() { unlocked <- l.Unlock(ctx) }()
			select {
			case <-unlocked:
			case <-time.After(time.Minute):
				t.Error("Unlock still waiting after a virtual minute")
			}
			for _, s := range w.servers {
				s.Resume()
			}
		})
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the bubble's clock stopped: Unlock blocked on the renewer without letting virtual time advance")
	}
}

// pausedClock is the client's clock in a bubble after a pause of the whole
// process: both of its clocks are ahead of the bubble's by *off.
type pausedClock struct{ off *atomic.Int64 }

func (c pausedClock) now() (time.Time, time.Duration) {
	now := time.Now().Add(time.Duration(c.off.Load()))
	return now, time.Duration(now.UnixNano())
}
