package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"quorumlock.dev/internal/bugs"
)

var (
	// Package values, so that ending a lock allocates nothing.
	errUnlocked    = fmt.Errorf("%w: released by Unlock", ErrLockNotHeld)
	errLeaseRanOut = fmt.Errorf("%w: the lease ran out", ErrLockLost)
	// A nil *Lock, as a failed TryLock or Lock returns, holds nothing: its
	// methods say so instead of panicking.
	errNilLock = fmt.Errorf("%w: a nil *Lock (the call that would have returned it failed)", ErrLockNotHeld)
	nilLockCtx = func() context.Context {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(errNilLock)
		return ctx
	}()
)

// Context returns a context that is cancelled when the lock ends on this
// side, as [Lock.Done] is closed. context.Cause then says why: an error
// wrapping [ErrLockLost] when the lock was lost, [ErrLockNotHeld] after
// Unlock. It has no deadline, since Extend moves the end (see [Lock.Until]).
func (l *Lock) Context() context.Context {
	if l == nil {
		return nilLockCtx
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.ended && l.over(l.until, l.untilBoot) && !bugs.DoneLateAfterLease {
		// Read after the lease ran out (the holder was paused, or its
		// timer has not run yet): ended now, not when a timer fires.
		l.endLocked(errLeaseRanOut)
	}
	return l.watchLocked()
}

// checkLease ends the lock when its lease has run out, whether or not the
// timer of Context has fired yet.
func (l *Lock) checkLease() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.ended && l.over(l.until, l.untilBoot) {
		l.endLocked(errLeaseRanOut)
	}
}

// Do runs fn under the lock on resource: it takes the lock with
// [Client.Lock], calls fn with a context that ends when ctx does or the lock
// ends, and unlocks. It returns Lock's error without running fn, or fn's error
// joined with an [ErrLockLost] error when the lock was lost before fn returned.
func (c *Client) Do(ctx context.Context, resource string, ttl time.Duration, fn func(ctx context.Context, l *Lock) error) error {
	l, err := c.Lock(ctx, resource, ttl)
	if err != nil {
		return err
	}
	returned := false
	defer func() {
		if !returned { // fn panicked: free the masters, let the panic go on
			_ = l.Unlock(ctx)
		}
	}()
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	lctx := l.Context()
	stop := context.AfterFunc(lctx, func() { cancel(context.Cause(lctx)) })
	fnErr := fn(fctx, l)
	returned = true
	stop()
	lost := l.finish(ctx)
	if lost != nil && errors.Is(fnErr, lost) {
		return fnErr // fn returned the context's cause: once is enough
	}
	return errors.Join(fnErr, lost)
}

// finish unlocks after Do's fn returned and tells whether the lock was lost
// meanwhile. A release that cannot reach a majority is not an error of the
// work, which ran under the lease; it is logged, and the keys expire.
func (l *Lock) finish(ctx context.Context) error {
	l.checkLease()
	l.mu.Lock()
	cause, unlocked := l.cause, l.unlocked
	l.mu.Unlock()
	if errors.Is(cause, ErrLockLost) {
		_ = l.Unlock(ctx)
		return cause
	}
	if unlocked { // fn called Unlock itself
		return nil
	}
	switch err := l.Unlock(ctx); {
	case errors.Is(err, ErrLockNotHeld):
		// Fewer than a majority still had our token: it expired or was
		// taken from under us while fn ran.
		return fmt.Errorf("%w: %w", ErrLockLost, err)
	case err != nil:
		l.c.cfg.logger.Warn("redlock: release after Do could not reach a majority; the keys are left to expire", "resource", l.resource, "err", err)
	}
	return nil
}
