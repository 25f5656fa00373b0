package redlock

import (
	"context"
	"fmt"
	"time"
)

// Progress records that the holder has moved its work forward. The renewer
// of [Lock.Renew] extends the lease only when Progress was called since the
// last extension: a stuck holder loses the lock instead of keeping it.
func (l *Lock) Progress() {
	if l != nil {
		l.progress.Add(1)
	}
}

// Renew starts a renewer that extends the lock by ttl before its lease runs
// out, only if [Lock.Progress] was called since the last extension and never
// past maxHold from now (docs/design.md, "Holding a lock through long work").
// When it cannot, it logs at Error, ends the lock (the cause of its context
// wraps [ErrLockLost]; [Hooks].Hold hears why) and frees the masters.
func (l *Lock) Renew(ttl, maxHold time.Duration) error {
	if l == nil {
		return errNilLock
	}
	c := l.c
	if err := c.check(l.resource, ttl); err != nil {
		return err
	}
	lease := c.lease(ttl)
	lead := max(lease/3, 2*c.cfg.nodeTimeout)
	switch {
	case lead > lease/2:
		// Checks would come so close together that the holder would have
		// to report progress almost continuously.
		return invalid("ttl %v leaves a lease of %v, too short to renew: renewal starts %v before the end", ttl, lease, lead)
	case maxHold <= 0:
		return invalid("max hold %v is not positive", maxHold)
	}
	start, _ := c.clock.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return fmt.Errorf("%w: the lock has ended", ErrLockNotHeld)
	}
	if l.renewer != nil {
		return invalid("the lock on %q already has a renewer", l.resource)
	}
	l.renewer = make(chan struct{})
	go l.renew(renewal{ttl: ttl, lease: lease, lead: lead, until: start.Add(maxHold)},
		l.watchLocked().Done(), l.progress.Load(), l.renewer)
	return nil
}

type renewal struct {
	ttl, lease, lead time.Duration
	until            time.Time // no lease may end later: the maximum hold
}

func (l *Lock) renew(r renewal, done <-chan struct{}, seen uint64, stopped chan struct{}) {
	defer close(stopped)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now, _ := l.c.clock.now()
		until := l.Until()
		if wait := until.Sub(now) - r.lead; wait > 0 {
			// Capped so that a suspend, which stops the timer, costs at most
			// leaseCheck: Until counts the suspend.
			timer.Reset(min(wait, leaseCheck))
			select {
			case <-done:
				l.reportLapse()
				return
			case <-timer.C:
			}
			continue
		}
		if !until.After(now) {
			// The lease ran out before the renewer ran: the process or the
			// machine was paused past it, and the lock's own timer has not
			// ended it yet. That is why it ended, not the work's progress,
			// which stood still in the pause too.
			l.lose(errLeaseRanOut)
			l.reportLapse()
			return
		}
		select {
		case <-done:
			l.reportLapse()
			return
		default:
		}
		p := l.progress.Load()
		var reason error
		switch {
		case p == seen:
			reason = ErrNoProgress
		case now.Add(r.lease).After(r.until):
			reason = ErrMaxHold
		default:
			if !l.renewOnce(r) {
				return // the failed Extend ended the lock and released its keys
			}
			seen = p
			continue
		}
		l.stopRenewing(reason)
		return
	}
}

// renewOnce extends the lock by r.ttl for the renewer. false: the Extend
// failed, which ended the lock and released its keys, and the failure was
// reported.
func (l *Lock) renewOnce(r renewal) bool {
	reported := false
	err := l.extend(context.Background(), r.ttl, func(err error) {
		reported = true
		l.report(err)
	})
	switch {
	case err == nil:
		l.c.cfg.logger.Debug("redlock: renewed", "resource", l.resource, "ttl", r.ttl)
		return true
	case !reported && !l.isUnlocked():
		// Ended by its lease before this extension: late, but a failure.
		l.report(err)
	}
	return false
}

// stopRenewing ends a renewed lock for reason (no progress, or its maximum
// hold) and releases it, unless it has ended already.
func (l *Lock) stopRenewing(reason error) {
	// Under op, so that an Unlock in flight is not reported as a failure.
	l.op.lock()
	if l.isEnded() {
		l.op.unlock()
		l.reportLapse()
		return
	}
	l.report(reason)
	l.lose(fmt.Errorf("%w: renewal: %w", ErrLockLost, reason))
	l.op.unlock()
	_ = l.unlock(context.Background()) // its failures are logged by the release
}

func (l *Lock) isUnlocked() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.unlocked
}

// reportLapse reports a lock whose lease ran out under the renewer, which
// was late (a suspend, a starved process); an Unlock or Extend ended it
// otherwise, and those callers have their answer.
func (l *Lock) reportLapse() {
	l.mu.Lock()
	cause := l.cause
	l.mu.Unlock()
	if cause == errLeaseRanOut {
		l.report(cause)
	}
}

func (l *Lock) isEnded() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ended
}

// report logs a renewal that could not be made (the Hold hook hears of the
// lock's end).
func (l *Lock) report(reason error) {
	l.c.cfg.logger.Error("redlock: renewal failed; ending the lock", "resource", l.resource, "err", reason)
}
