package redlock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Renewal's logic is tested in virtual time (renew_virtual_test.go); these
// are what a virtual world cannot show: a suspended machine, bad input.

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

// TestRenewAfterSuspend: the machine sleeps past the lease under the
// renewer. The lock ends and the lapse is reported once, whichever of the
// renewer and the lease timer sees it first.
func TestRenewAfterSuspend(t *testing.T) {
	_, masters := miniMasters(t, 3)
	obs := &recorder{}
	c := newTestClient(t, masters, WithHooks(hooksOf(obs)))
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
	c := newTestClient(t, masters, WithNodeTimeout(defaultNodeTimeout)) // node timeout 50 ms
	l, err := c.TryLock(ctx, resourceName(t), time.Minute)
	require.NoError(t, err)
	assert.ErrorIs(t, l.Renew(150*time.Millisecond, time.Minute), ErrInvalidArgument, "no room to renew in")
	assert.ErrorIs(t, l.Renew(time.Second, 0), ErrInvalidArgument)
	require.NoError(t, l.Renew(time.Second, time.Minute))
	assert.ErrorIs(t, l.Renew(time.Second, time.Minute), ErrInvalidArgument, "one renewer per lock")
	require.NoError(t, l.Unlock(ctx))
	assertStopped(t, l)
	assert.ErrorIs(t, l.Renew(time.Second, time.Minute), ErrLockNotHeld)

	// No hooks at all is the default: a renewal failure is only logged.
	_, err = New(masters, WithHooks(Hooks{}))
	assert.NoError(t, err)
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
