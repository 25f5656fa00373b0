package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/driver"
)

// lateMaster delays the acquiring SET before it reaches the server, ignoring
// the caller's context as go-redis does by default, and records when the
// SET returned and when the first script (the release) was sent.
type lateMaster struct {
	full
	delay       time.Duration
	setReturned atomic.Int64 // unix ns
	releaseSent atomic.Int64
}

func (m *lateMaster) SetNX(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	time.Sleep(m.delay)
	set, err := m.full.SetNX(context.WithoutCancel(ctx), key, value, ttl)
	m.setReturned.Store(time.Now().UnixNano())
	return set, err
}

func (m *lateMaster) Eval(ctx context.Context, s *driver.Script, keys []string, args ...any) (any, error) {
	if s == warmScript {
		return m.full.Eval(ctx, s, keys, args...)
	}
	m.releaseSent.CompareAndSwap(0, time.Now().UnixNano())
	return m.full.Eval(ctx, s, keys, args...)
}

// TestCleanupWaitsForInFlightSet: a lost attempt releases a master whose
// SET was still in flight only after that SET returned, so the release
// cannot overtake it and leave our key behind; also when the caller's
// context was cancelled.
func TestCleanupWaitsForInFlightSet(t *testing.T) {
	for _, cancelled := range []bool{false, true} {
		name := "lost"
		if cancelled {
			name = "cancelled"
		}
		t.Run(name, func(t *testing.T) {
			servers, masters := miniMasters(t, 3)
			res := resourceName(t)
			late := &lateMaster{full: masters[2].(full), delay: 300 * time.Millisecond}
			masters[2] = late
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if cancelled {
				// Two late masters, so only the cancellation can end the attempt.
				masters[1] = &lateMaster{full: masters[1].(full), delay: 300 * time.Millisecond}
				time.AfterFunc(20*time.Millisecond, cancel)
			} else {
				for _, s := range servers[:2] {
					require.NoError(t, s.Set("lock:"+res, "someone-else"))
				}
			}
			c := newTestClient(t, masters, WithNodeTimeout(100*time.Millisecond))

			l, err := c.TryLock(ctx, res, time.Minute)
			require.Error(t, err)
			assert.Nil(t, l)
			if cancelled {
				// Two masters had not answered when the caller cancelled:
				// unavailable in the time the caller gave, not held by others.
				assert.ErrorIs(t, err, ErrQuorumUnavailable)
				assert.ErrorIs(t, err, context.Canceled)
				assert.False(t, servers[0].Exists("lock:"+res), "a responsive master keeps our key")
			}

			require.Eventually(t, func() bool { return late.releaseSent.Load() != 0 }, 5*time.Second, time.Millisecond,
				"the late master was never released")
			assert.GreaterOrEqual(t, late.releaseSent.Load(), late.setReturned.Load(), "the release overtook the SET")
			assert.NotZero(t, late.setReturned.Load())
			assert.Eventually(t, func() bool { return !servers[2].Exists("lock:" + res) }, 5*time.Second, time.Millisecond,
				"the late SET's key is left behind")
			if cancelled {
				assert.Eventually(t, func() bool { return !servers[1].Exists("lock:" + res) }, 5*time.Second, time.Millisecond,
					"the late SET's key is left behind")
			}
			if !cancelled {
				assert.ErrorIs(t, err, ErrNotAcquired)
				for _, s := range servers[:2] {
					v, _ := s.Get("lock:" + res)
					assert.Equal(t, "someone-else", v)
				}
			}
		})
	}
}

// TestResponsiveSlowMasterReleasedBeforeReturn: a master that answers after
// the outcome was known but within the node timeout is responsive; its key
// is gone when TryLock returns.
func TestResponsiveSlowMasterReleasedBeforeReturn(t *testing.T) {
	servers, masters := miniMasters(t, 3)
	res := resourceName(t)
	masters[2] = &lateMaster{full: masters[2].(full), delay: 50 * time.Millisecond}
	for _, s := range servers[:2] {
		require.NoError(t, s.Set("lock:"+res, "someone-else"))
	}
	c := newTestClient(t, masters, WithNodeTimeout(time.Second))
	_, err := c.TryLock(context.Background(), res, time.Minute)
	require.ErrorIs(t, err, ErrNotAcquired)
	assert.False(t, servers[2].Exists("lock:"+res), "TryLock returned before releasing a responsive master")
}

// TestUnlockDoesNotWaitForSlowMaster: Unlock right after a win releases the
// masters that answered and returns; a master whose SET is still in flight
// is released when that SET returns, so its key does not outlive the lock.
func TestUnlockDoesNotWaitForSlowMaster(t *testing.T) {
	servers, masters := miniMasters(t, 3)
	res := resourceName(t)
	late := &lateMaster{full: masters[2].(full), delay: 300 * time.Millisecond}
	masters[2] = late
	c := newTestClient(t, masters, WithNodeTimeout(time.Second))
	l, err := c.TryLock(context.Background(), res, time.Minute)
	require.NoError(t, err)
	start := time.Now()
	require.NoError(t, l.Unlock(context.Background()))
	assert.Less(t, time.Since(start), 250*time.Millisecond, "Unlock waited for the slow master's SET")
	assert.False(t, servers[0].Exists("lock:"+res))
	assert.False(t, servers[1].Exists("lock:"+res))
	require.Eventually(t, func() bool { return late.releaseSent.Load() != 0 }, 5*time.Second, time.Millisecond)
	assert.GreaterOrEqual(t, late.releaseSent.Load(), late.setReturned.Load(), "the release overtook the SET")
	assert.Eventually(t, func() bool { return !servers[2].Exists("lock:" + res) }, 5*time.Second, time.Millisecond)
}

// TestNeverSent: only a dial error of a client that never retries proves a
// SET never left; a retrying client may have written it on an earlier try.
func TestNeverSent(t *testing.T) {
	_, masters := miniMasters(t, 1)
	retrying := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // MaxRetries 0: go-redis's default of 3
	t.Cleanup(func() { _ = retrying.Close() })
	c := newTestClient(t, conns(masters[0], retrying))
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
	read := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("i/o timeout")}
	assert.True(t, c.neverSent(0, dial))
	assert.True(t, c.neverSent(0, fmt.Errorf("wrapped: %w", dial)))
	assert.False(t, c.neverSent(1, dial), "a retrying client may have sent the SET before the dial that failed")
	assert.True(t, c.neverSent(1, errStuck), "the breaker held the call back")
	assert.False(t, c.neverSent(0, read), "a read error may follow a SET the server applied")
	assert.False(t, c.neverSent(0, errors.New("WRONGTYPE")))
	assert.False(t, c.neverSent(0, nil))
}

// TestDeadMastersNotReleased: masters that refused the connection are not
// sent a release (the SET never reached them), so a lost attempt does not
// wait for them twice.
func TestDeadMastersNotReleased(t *testing.T) {
	servers, masters := miniMasters(t, 5)
	var evals atomic.Int64
	for i := range masters {
		masters[i] = &countingScripts{full: masters[i].(full), evals: &evals}
	}
	for _, s := range servers[:3] {
		s.Close()
	}
	c := newTestClient(t, masters, WithNodeTimeout(time.Second))
	_, err := c.TryLock(context.Background(), resourceName(t), time.Minute)
	require.ErrorIs(t, err, ErrQuorumUnavailable)
	assert.Equal(t, int64(2), evals.Load(), "only the two live masters are released")
}

type countingScripts struct {
	full
	evals *atomic.Int64
}

func (m *countingScripts) Eval(ctx context.Context, s *driver.Script, keys []string, args ...any) (any, error) {
	if s != warmScript {
		m.evals.Add(1)
	}
	return m.full.Eval(ctx, s, keys, args...)
}
