package redlock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/internal/redisserver"
)

// Renewal tests run on real redis-server processes: the keys there expire
// by the server's clock, so a lock that keeps them over several TTLs was
// truly extended.

// recorder is an Observer that keeps what it was told.
type recorder struct {
	mu      sync.Mutex
	reasons []error
}

func (r *recorder) RenewalFailed(resource string, reason error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reasons = append(r.reasons, reason)
}

func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reasons = nil
}

func (r *recorder) told() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.reasons...)
}

// ticker calls l.Progress every period until the test ends or stop is called.
func ticker(t *testing.T, l *Lock, period time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
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
	}()
	var once sync.Once
	stop = func() { once.Do(func() { close(done); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

type renewRig struct {
	servers []*redisserver.Server
	client  *Client
	obs     *recorder
}

func newRenewRig(t *testing.T) renewRig {
	servers, masters, _ := realMasters(t, 3)
	obs := &recorder{}
	return renewRig{servers: servers, client: newTestClient(t, masters, WithObserver(obs)), obs: obs}
}

// holding counts the masters whose key holds l's token.
func (r renewRig) holding(t *testing.T, l *Lock) int {
	n := 0
	for _, s := range r.servers {
		if lockValue(t, s.Addr(), l.Resource()) == l.Token() {
			n++
		}
	}
	return n
}

func (r renewRig) gone(t *testing.T, l *Lock) bool {
	for _, s := range r.servers {
		if lockValue(t, s.Addr(), l.Resource()) != "" {
			return false
		}
	}
	return true
}

func TestRenew(t *testing.T) {
	ctx := context.Background()
	r := newRenewRig(t)

	t.Run("a stalled worker loses the lock at the next check", func(t *testing.T) {
		// A TTL long enough that the release is seen well before the keys
		// would expire by themselves.
		ttl := 1500 * time.Millisecond
		l, err := r.client.TryLock(ctx, resourceName(t), ttl)
		require.NoError(t, err)
		until := l.Until()
		require.NoError(t, l.Renew(ttl, time.Minute))
		lctx := l.Context()
		waitDone(t, lctx, 5*time.Second, "a stalled worker kept the lock")
		cause := context.Cause(lctx)
		assert.ErrorIs(t, cause, ErrLockLost)
		assert.ErrorIs(t, cause, ErrNoProgress)
		told := r.obs.told()
		require.Len(t, told, 1, "the observer hears of the failure before the context ends")
		assert.ErrorIs(t, told[0], ErrNoProgress)
		assert.Eventually(t, func() bool { return r.gone(t, l) }, 5*time.Second, 5*time.Millisecond, "keys left on the masters")
		assert.True(t, time.Now().Before(until), "the keys expired by themselves; the renewer did not release them")
		assert.ErrorIs(t, l.Unlock(ctx), ErrLockNotHeld)
		r.obs.reset()
	})
	t.Run("a progressing worker keeps it over several TTLs", func(t *testing.T) {
		ttl := 300 * time.Millisecond
		l, err := r.client.TryLock(ctx, resourceName(t), ttl)
		require.NoError(t, err)
		stop := ticker(t, l, 20*time.Millisecond)
		require.NoError(t, l.Renew(ttl, time.Minute))
		lctx := l.Context()
		select {
		case <-lctx.Done():
			t.Fatalf("lost while progressing: %v", context.Cause(lctx))
		case <-time.After(4 * ttl):
		}
		assert.GreaterOrEqual(t, r.holding(t, l), r.client.Quorum(), "the keys outlived their TTL: extended")
		stop()
		require.NoError(t, l.Unlock(ctx))
		assert.Empty(t, r.obs.told())
		assertStopped(t, l)
	})
	t.Run("keys deleted behind its back: Extend fails", func(t *testing.T) {
		ttl := 300 * time.Millisecond
		l, err := r.client.TryLock(ctx, resourceName(t), ttl)
		require.NoError(t, err)
		ticker(t, l, 20*time.Millisecond)
		require.NoError(t, l.Renew(ttl, time.Minute))
		lctx := l.Context()
		for _, s := range r.servers {
			del(t, s.Addr(), l.Resource())
		}
		waitDone(t, lctx, 5*time.Second, "a failed extension left the context open")
		cause := context.Cause(lctx)
		assert.ErrorIs(t, cause, ErrLockLost)
		assert.ErrorIs(t, cause, ErrLockNotHeld, "the cause carries Extend's error")
		told := r.obs.told()
		require.Len(t, told, 1)
		assert.ErrorIs(t, told[0], ErrLockNotHeld)
		r.obs.reset()
	})
	t.Run("max hold ends it", func(t *testing.T) {
		ttl := 300 * time.Millisecond
		l, err := r.client.TryLock(ctx, resourceName(t), ttl)
		require.NoError(t, err)
		until := l.Until()
		ticker(t, l, 20*time.Millisecond)
		require.NoError(t, l.Renew(ttl, 700*time.Millisecond))
		lctx := l.Context()
		waitDone(t, lctx, 5*time.Second, "held past the maximum")
		assert.ErrorIs(t, context.Cause(lctx), ErrMaxHold)
		assert.True(t, time.Now().After(until), "never extended before max hold")
		told := r.obs.told()
		require.Len(t, told, 1)
		assert.ErrorIs(t, told[0], ErrMaxHold)
		assert.Eventually(t, func() bool { return r.gone(t, l) }, 5*time.Second, 5*time.Millisecond)
		r.obs.reset()
	})
	t.Run("Do returns fn's error joined with the loss", func(t *testing.T) {
		ttl := 300 * time.Millisecond
		stalled := errors.New("stalled")
		err := r.client.Do(ctx, resourceName(t), ttl, func(ctx context.Context, l *Lock) error {
			require.NoError(t, l.Renew(ttl, time.Minute))
			waitDone(t, ctx, 5*time.Second, "fn's context open after the renewer gave up")
			return stalled
		})
		assert.ErrorIs(t, err, stalled)
		assert.ErrorIs(t, err, ErrLockLost)
		assert.ErrorIs(t, err, ErrNoProgress)
		assert.Equal(t, 1, strings.Count(err.Error(), ErrLockLost.Error()), "the loss is told once: %v", err)
		r.obs.reset()
	})
	t.Run("Do with fn returning the cause tells it once", func(t *testing.T) {
		ttl := 300 * time.Millisecond
		err := r.client.Do(ctx, resourceName(t), ttl, func(ctx context.Context, l *Lock) error {
			require.NoError(t, l.Renew(ttl, time.Minute))
			waitDone(t, ctx, 5*time.Second, "fn's context open after the renewer gave up")
			return context.Cause(ctx)
		})
		assert.ErrorIs(t, err, ErrNoProgress)
		assert.Equal(t, 1, strings.Count(err.Error(), ErrLockLost.Error()), "the loss is told once: %v", err)
		r.obs.reset()
	})
}

// TestRenewMastersStopped: two of three masters die under a progressing
// holder; the next extension finds no quorum and the context ends.
func TestRenewMastersStopped(t *testing.T) {
	r := newRenewRig(t)
	ctx := context.Background()
	ttl := 300 * time.Millisecond
	l, err := r.client.TryLock(ctx, resourceName(t), ttl)
	require.NoError(t, err)
	ticker(t, l, 20*time.Millisecond)
	require.NoError(t, l.Renew(ttl, time.Minute))
	lctx := l.Context()
	for _, s := range r.servers[:2] {
		require.NoError(t, s.Kill())
	}
	waitDone(t, lctx, 5*time.Second, "the context outlived its masters")
	assert.ErrorIs(t, context.Cause(lctx), ErrLockLost)
	assert.ErrorIs(t, context.Cause(lctx), ErrQuorumUnavailable)
	require.Len(t, r.obs.told(), 1)
}

// TestRenewAfterSuspend: the machine sleeps past the lease under the
// renewer. The lock ends and the lapse is reported once, whichever of the
// renewer and the lease timer sees it first.
func TestRenewAfterSuspend(t *testing.T) {
	_, masters := miniMasters(t, 3)
	obs := &recorder{}
	c := newTestClient(t, masters, WithObserver(obs))
	clk := &suspendClock{}
	c.clock = clk
	ctx := context.Background()
	l, err := c.TryLock(ctx, resourceName(t), time.Minute)
	require.NoError(t, err)
	require.NoError(t, l.Renew(time.Minute, time.Hour))
	l.Progress()
	lctx := l.Context()
	clk.sleep(2 * time.Minute)
	waitDone(t, lctx, 3*leaseCheck, "the lock outlived the suspend")
	assert.ErrorIs(t, context.Cause(lctx), ErrLockLost)
	_ = l.Unlock(ctx) // the renewer has stopped when it returns
	told := obs.told()
	require.Len(t, told, 1, "the lapse is reported once")
	assert.True(t, errors.Is(told[0], ErrLockNotHeld) || errors.Is(told[0], ErrLockLost),
		"Extend's refusal, or the lost lease: %v", told[0])
}

func TestRenewArguments(t *testing.T) {
	ctx := context.Background()
	_, masters := miniMasters(t, 3)
	c := newTestClient(t, masters) // node timeout 50 ms
	l, err := c.TryLock(ctx, resourceName(t), time.Minute)
	require.NoError(t, err)
	assert.ErrorIs(t, l.Renew(150*time.Millisecond, time.Minute), ErrInvalidArgument, "no room to renew in")
	assert.ErrorIs(t, l.Renew(time.Second, 0), ErrInvalidArgument)
	require.NoError(t, l.Renew(time.Second, time.Minute))
	assert.ErrorIs(t, l.Renew(time.Second, time.Minute), ErrInvalidArgument, "one renewer per lock")
	require.NoError(t, l.Unlock(ctx))
	assertStopped(t, l)
	assert.ErrorIs(t, l.Renew(time.Second, time.Minute), ErrLockNotHeld)

	_, err = New(masters, WithObserver(nil))
	assert.ErrorIs(t, err, ErrInvalidArgument)
}

// TestRenewUnlockRace: Unlock while the renewer extends; Unlock wins, the
// renewer stops quietly, and nothing is reported as failed.
func TestRenewUnlockRace(t *testing.T) {
	ctx := context.Background()
	_, masters := miniMasters(t, 3)
	obs := &recorder{}
	c := newTestClient(t, masters, WithObserver(obs)) // node timeout 50 ms
	for i := range 20 {
		ttl := 300 * time.Millisecond
		l, err := c.TryLock(ctx, resourceName(t), ttl)
		require.NoError(t, err)
		require.NoError(t, l.Renew(ttl, time.Minute))
		l.Progress()
		// Around the first check (100 ms before Until), where the renewer extends.
		time.Sleep(time.Until(l.Until()) - 110*time.Millisecond + time.Duration(i)*time.Millisecond)
		require.NoError(t, l.Unlock(ctx))
		assertStopped(t, l)
	}
	assert.Empty(t, obs.told())
}

// del deletes the lock key on a master through a short-lived client.
func del(t *testing.T, addr, resource string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: 2 * time.Second})
	defer c.Close()
	require.NoError(t, c.Del(context.Background(), "lock:"+resource).Err())
}

// assertStopped: the renewer has returned (Unlock promises it).
func assertStopped(t *testing.T, l *Lock) {
	t.Helper()
	l.mu.Lock()
	stopped := l.renewer
	l.mu.Unlock()
	require.NotNil(t, stopped)
	select {
	case <-stopped:
	default:
		t.Error("the renewer still runs after Unlock")
	}
}
