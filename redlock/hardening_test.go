package redlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/fence"

	"quorumlock.dev/driver"
	"quorumlock.dev/driver/goredis"
)

// slowScripts delays every script (extend, release) by delay before it
// reaches the server, ignoring the context, as a slow network would.
type slowScripts struct {
	full
	delay time.Duration
}

func (m *slowScripts) Eval(ctx context.Context, s *driver.Script, keys []string, args ...any) (any, error) {
	time.Sleep(m.delay)
	return m.full.Eval(ctx, s, keys, args...)
}

// TestExtendOutcomeIndependentOfDone: an Extend that starts 5 ms before
// Until over a 20 ms network answers after the lease ran out. Whether or
// not the holder ever asked for Done, it fails, and the keys it extended
// are released, not left to live for the new TTL.
func TestExtendOutcomeIndependentOfDone(t *testing.T) {
	for _, watched := range []bool{false, true} {
		t.Run(fmt.Sprintf("done=%v", watched), func(t *testing.T) {
			servers, masters := miniMasters(t, 3)
			for i := range masters {
				masters[i] = &slowScripts{full: masters[i].(full), delay: 20 * time.Millisecond}
			}
			c := newTestClient(t, masters, WithNodeTimeout(100*time.Millisecond))
			res := resourceName(t)
			l, err := c.TryLock(context.Background(), res, 300*time.Millisecond)
			require.NoError(t, err)
			settle(t, servers, res, l)
			var done <-chan struct{}
			if watched {
				done = l.Done()
			}
			time.Sleep(time.Until(l.Until()) - 5*time.Millisecond)

			err = l.Extend(context.Background(), time.Minute)
			require.ErrorIs(t, err, ErrLockNotHeld)
			if watched {
				assertClosed(t, done, "a failed Extend closes Done")
			}
			for i, s := range servers {
				assert.Eventually(t, func() bool { return !s.Exists("lock:" + res) }, 2*time.Second, time.Millisecond,
					"master %d keeps the key the failed Extend prolonged", i)
			}
		})
	}
}

// TestUnlockQuietWhenClean: clean unlocks on healthy masters log nothing at
// Warn, although Unlock returns before the last master confirmed.
func TestUnlockQuietWhenClean(t *testing.T) {
	_, masters := miniMasters(t, 3)
	var buf syncBuffer
	c := newTestClient(t, masters, WithLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	ctx := context.Background()
	for range 200 {
		l, err := c.TryLock(ctx, resourceName(t), time.Minute)
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
	}
	time.Sleep(100 * time.Millisecond) // the background releases finish
	assert.Empty(t, buf.String())
}

// TestUnlockWarnsOnFailedRelease: a release that really fails is logged at
// Warn with the master's address.
func TestUnlockWarnsOnFailedRelease(t *testing.T) {
	servers, masters := miniMasters(t, 3)
	var buf syncBuffer
	c := newTestClient(t, masters, WithLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	ctx := context.Background()
	l, err := c.TryLock(ctx, resourceName(t), time.Minute)
	require.NoError(t, err)
	servers[2].SetError("ERR injected")
	err = l.Unlock(ctx)
	if err != nil { // the broken master may have been the one Unlock waited for
		require.ErrorIs(t, err, ErrQuorumUnavailable)
	}
	assert.Eventually(t, func() bool {
		return strings.Contains(buf.String(), "release failed") && strings.Contains(buf.String(), servers[2].Addr())
	}, 2*time.Second, time.Millisecond, buf.String())
}

// TestTTLWithoutValidity: a TTL that leaves no more than the node timeout
// after the drift allowance can never give a lock: refused up front.
func TestTTLWithoutValidity(t *testing.T) {
	_, masters := miniMasters(t, 1)
	ctx := context.Background()
	for _, tt := range []struct {
		name string
		opts []Option
		ttl  time.Duration
	}{
		{"ttl 2ms, node timeout 1ms", []Option{WithNodeTimeout(time.Millisecond)}, 2 * time.Millisecond},
		{"one-hour drift constant", []Option{WithDrift(0.01, time.Hour)}, 30 * time.Minute},
		{"drift allowance eats the margin", nil, 52 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newTestClient(t, masters, append([]Option{WithNodeTimeout(defaultNodeTimeout)}, tt.opts...)...)
			_, err := c.TryLock(ctx, resourceName(t), tt.ttl)
			assert.ErrorIs(t, err, ErrInvalidArgument)
			_, err = c.Lock(ctx, resourceName(t), tt.ttl)
			assert.ErrorIs(t, err, ErrInvalidArgument)
		})
	}
	c := newTestClient(t, masters, WithNodeTimeout(defaultNodeTimeout))
	l, err := c.TryLock(ctx, resourceName(t), 60*time.Millisecond)
	require.NoError(t, err, "60 ms leaves 57.4 ms after the allowance, above the 50 ms node timeout")
	assert.ErrorIs(t, l.Extend(ctx, 52*time.Millisecond), ErrInvalidArgument)
	_ = l.Unlock(ctx)
}

// suspendClock is a clock whose suspend-counting reading can be moved on
// while the monotonic one cannot: a machine that slept.
type suspendClock struct {
	mu    sync.Mutex
	slept time.Duration
}

func (c *suspendClock) now() (time.Time, time.Duration) {
	mono, boot := systemClock{}.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	return mono, boot + c.slept
}

func (c *suspendClock) sleep(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slept += d
}

// TestLeaseEndsAfterSuspend: the machine sleeps for two minutes inside a
// one-minute lease. The monotonic clock did not move, but the masters'
// keys expired: Until is past, Extend refuses, Done closes.
func TestLeaseEndsAfterSuspend(t *testing.T) {
	_, masters := miniMasters(t, 3)
	c := newTestClient(t, masters)
	clk := &suspendClock{}
	c.clock = clk
	ctx := context.Background()
	l, err := c.TryLock(ctx, resourceName(t), time.Minute)
	require.NoError(t, err)
	done := l.Done()
	assert.True(t, l.Until().After(time.Now().Add(50*time.Second)))

	clk.sleep(2 * time.Minute)
	assert.False(t, l.Until().After(time.Now()), "Until did not notice the suspend")
	select {
	case <-done:
	case <-time.After(3 * leaseCheck):
		t.Fatal("Done not closed after the suspend")
	}
	assert.ErrorIs(t, l.Extend(ctx, time.Minute), ErrLockNotHeld)

	// Without the suspend, the same lease is intact.
	l2, err := c.TryLock(ctx, resourceName(t), time.Minute)
	require.NoError(t, err)
	require.NoError(t, l2.Extend(ctx, time.Minute))
	require.NoError(t, l2.Unlock(ctx))
}

// TestRingRefused: a *redis.Ring re-homes keys when a shard is marked down,
// so it cannot be a master.
func TestRingRefused(t *testing.T) {
	_, masters := miniMasters(t, 2)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1", "b": "127.0.0.1:2"}})
	t.Cleanup(func() { _ = ring.Close() })
	_, err := New(conns(masters[0], masters[1], ring))
	require.ErrorIs(t, err, ErrInvalidArgument)
	assert.Contains(t, err.Error(), "Ring")
}

// TestFailoverMasters: three Sentinel-managed masters under different
// names all report the address "FailoverClient"; they are accepted, and
// named by their position.
func TestFailoverMasters(t *testing.T) {
	masters := make([]Master, 3)
	for i := range masters {
		fc := redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: fmt.Sprintf("lock-%d", i), SentinelAddrs: []string{"127.0.0.1:1"},
			MaxRetries: -1, DialTimeout: 50 * time.Millisecond,
		})
		t.Cleanup(func() { _ = fc.Close() })
		masters[i] = goredis.Conn(fc)
	}
	c, err := New(masters)
	require.NoError(t, err)
	assert.Equal(t, []string{"master 0", "master 1", "master 2"}, c.addrs)
	_, err = New(conns(masters[0], masters[0]))
	assert.ErrorIs(t, err, ErrInvalidArgument, "the same client twice is still refused")
}

// TestCounterRegressedEndsLock: a fence counter that went backwards ends
// Lock at once, logged at Error: retrying would mint more values the counter
// may have handed out before.
func TestCounterRegressedEndsLock(t *testing.T) {
	_, masters := miniMasters(t, 3)
	m := &countingMinter{err: fmt.Errorf("%w: INCR gave 5", fence.ErrCounterRegressed)}
	var buf syncBuffer
	c := newTestClient(t, masters, WithFence(m), WithRetry(10, time.Millisecond, 0),
		WithLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelError}))))
	_, err := c.Lock(context.Background(), resourceName(t), time.Minute)
	require.ErrorIs(t, err, ErrFenceUnavailable)
	require.ErrorIs(t, err, fence.ErrCounterRegressed)
	assert.Equal(t, int64(1), m.calls.Load(), "Lock retried through a regressed counter")
	assert.Contains(t, buf.String(), "level=ERROR")
}

// wrappedNil returns go-redis's nil reply wrapped, as a middleware might.
type wrappedNil struct{ *redis.Client }

func (m wrappedNil) Process(ctx context.Context, cmd redis.Cmder) error {
	if err := m.Client.Process(ctx, cmd); err != nil {
		return fmt.Errorf("traced: %w", err)
	}
	return nil
}

// TestWrappedNilIsARefusal: a nil reply that reaches us wrapped is still
// "held by another", not a failed master.
func TestWrappedNilIsARefusal(t *testing.T) {
	servers, masters := miniMasters(t, 3)
	for i := range masters {
		masters[i] = goredis.Conn(wrappedNil{raw(masters[i])})
	}
	res := resourceName(t)
	for _, s := range servers {
		require.NoError(t, s.Set("lock:"+res, "someone-else"))
	}
	_, err := newTestClient(t, masters).TryLock(context.Background(), res, time.Minute)
	require.ErrorIs(t, err, ErrNotAcquired)
	assert.False(t, errors.Is(err, ErrQuorumUnavailable))
}

// resetMaster fails every SET after delay with a connection reset, as a
// server that crashed after reading it would, and its release hangs until
// the context ends: a master that is gone, after a command that may have
// been applied.
type resetMaster struct {
	full
	delay    time.Duration
	releases atomic.Int64
}

func (m *resetMaster) SetNX(context.Context, string, string, time.Duration) (bool, error) {
	time.Sleep(m.delay)
	return false, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
}

func (m *resetMaster) Eval(ctx context.Context, s *driver.Script, _ []string, _ ...any) (any, error) {
	if s == warmScript {
		return int64(0), nil
	}
	m.releases.Add(1)
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestFailedMastersReleasedInTheBackground: three of five masters are held
// by another client, and two fail the SET with a connection reset, soon
// after the three refusals decided the attempt. Their SET may have been
// applied, so each is sent a release, but the lost attempt does not wait for
// those releases: it returns when the two failures are in, not a node
// timeout later, spent on masters that are gone.
func TestFailedMastersReleasedInTheBackground(t *testing.T) {
	servers, masters := miniMasters(t, 5)
	res := resourceName(t)
	for _, s := range servers[:3] {
		require.NoError(t, s.Set("lock:"+res, "someone-else"))
	}
	var gone []*resetMaster
	for i := 3; i < 5; i++ {
		m := &resetMaster{full: masters[i].(full), delay: 50 * time.Millisecond}
		masters[i] = m
		gone = append(gone, m)
	}
	const timeout = 2 * time.Second
	c := newTestClient(t, masters, WithNodeTimeout(timeout))
	start := time.Now()
	_, err := c.TryLock(context.Background(), res, time.Minute)
	elapsed := time.Since(start)
	require.ErrorIs(t, err, ErrNotAcquired)
	assert.Less(t, elapsed, timeout/2, "the attempt waited for releases to masters that are gone")
	for _, m := range gone {
		// Tried again in the background while it gets no reply.
		assert.Eventually(t, func() bool { return m.releases.Load() >= 1 }, timeout, time.Millisecond,
			"a master whose SET may have been applied gets its release")
	}
}
