package redlock

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"quorumlock.dev/fence"
	"quorumlock.dev/quorum"
)

// Waiting between attempts is a policy that the core loop (Client.wait)
// asks, and knows nothing of: the plain one (plain.go: read the holders,
// sleep until their keys expire or their release is published, ask one
// master first when woken with others), the fair one ([WithFairness],
// fair.go and handoff.go: queue on the masters, pass the lock on within a
// client, hand it over between clients), and polling (LockAll).
// docs/design.md ("Waiting for a held lock", "Fair handoff") says why each
// is built as it is.

// A policy is a Client's way of waiting, chosen once by New.
type policy interface {
	// join makes the waiting state of one Lock call, before its first
	// attempt (a fair call may queue behind this client's waiters here,
	// and fail when ctx ends). A waiter it returns is ended, err or not.
	join(ctx context.Context, resource string, ttl time.Duration) (waiter, error)
	// unlock is Unlock's chance to hand l on to a waiter of this client,
	// given the lease l had and the cause of its end before Unlock (nil:
	// it had not ended). done: handed on, and err is Unlock's outcome;
	// otherwise l is released as usual, and then after, when not nil, runs.
	unlock(ctx context.Context, l *Lock, until time.Time, untilBoot time.Duration, lost error) (done bool, after func(), err error)
}

// A waiter is one Lock call between its attempts.
type waiter interface {
	// try makes the next attempt, or takes a lock handed to the call;
	// tried is false when a lock was handed over just as an attempt was
	// to start (the loop takes it next).
	try(ctx context.Context) (l *Lock, round *quorum.Round, err error, tried bool)
	// sleep waits after the lost attempt round (err its error); it
	// returns an error only when ctx ends.
	sleep(ctx context.Context, round *quorum.Round, err error) error
	// end undoes what waiting made, whether the call won or not.
	end(ctx context.Context)
}

// wakeJitter spreads the waiters that wake at one expiry, so that they do
// not all send their SETs at the same instant.
const wakeJitter = time.Millisecond

// maxWakeBackoff bounds the random wait before an attempt after
// consecutive wake-ups that each led to a lost attempt (see waitBase.woke).
const maxWakeBackoff = 16 * time.Millisecond

// wait is the loop of Lock and LockAll: attempt (or take a lock handed
// over), then ask the waiter how to wait, until a win, a fatal error, the
// attempt cap or the end of ctx.
func (c *Client) wait(ctx context.Context, join func() (waiter, error)) (*Lock, error) {
	if err := ctx.Err(); err != nil {
		return nil, c.notAttempted(err)
	}
	w, err := join()
	if w != nil {
		defer w.end(ctx) // also after a join that failed: a fair one may be listed
	}
	if err != nil {
		return nil, err
	}
	// last is the error of the last attempt the caller's context did not
	// cut short: a round cut short with masters still to answer is
	// reported only when no attempt before it ended by itself (its masters
	// had no time to say that others hold the lock).
	var last error
	for n := 0; ; {
		if err := ctx.Err(); err != nil {
			if last == nil {
				return nil, c.notAttempted(err)
			}
			return nil, errors.Join(last, err)
		}
		l, round, err, tried := w.try(ctx)
		if !tried {
			continue // a lock was handed to us instead
		}
		if !cutShort(ctx, round) || last == nil {
			last = err
		}
		switch {
		case err == nil:
			return l, nil
		case c.fatal(err):
			return nil, err
		case ctx.Err() != nil && last != err:
			return nil, errors.Join(last, ctx.Err())
		case ctx.Err() != nil:
			return nil, err
		}
		if n++; c.cfg.attempts > 0 && n >= c.cfg.attempts {
			return nil, err
		}
		if err := w.sleep(ctx, round, err); err != nil {
			return nil, err
		}
	}
}

// fatal reports, and logs, an error that retrying cannot cure.
func (c *Client) fatal(err error) bool {
	switch {
	case errors.Is(err, fence.ErrCounterRegressed):
		// Retrying would only mint more values the counter may have handed
		// out before: an operator must look at it.
		c.cfg.logger.Error("redlock: fence counter went backwards; not retrying", "err", err)
		return true
	case errors.Is(err, ErrWrongType):
		// Such a key does not go away by itself: waiting would be for ever.
		c.cfg.logger.Error("redlock: the lock's key holds another type on a majority of masters; not retrying", "err", err)
		return true
	}
	return false
}

// waitBase is what every waiter has: the call, its timer, the Waiting
// hook, and the count of wake-ups in a row that led to lost attempts.
type waitBase struct {
	c        *Client
	resource string
	ttl      time.Duration
	timer    *time.Timer
	waiting  bool       // the Waiting hook was told that this call waits
	woken    int        // sleeps in a row that a release cut short (see woke)
	rnd      *rand.Rand // the call's random stream (nil: the process's; see Client.stream)
}

// poll is the wait after a loss that no holder explains: the retry delay
// and its jitter. The first one tells the Waiting hook.
func (b *waitBase) poll() time.Duration {
	c := b.c
	if !b.waiting && c.cfg.hooks.Waiting != nil {
		b.waiting = true
		c.cfg.hooks.Waiting(1)
	}
	wait := c.cfg.delay
	if c.cfg.jitter > 0 {
		wait += randN(b.rnd, c.cfg.jitter)
	}
	return wait
}

// rest sleeps wait, cut short by a message on wake (then woke decides)
// or by a lock handed over on grant (returned); err is the lost attempt's,
// joined with ctx.Err() when ctx ends. A nil channel never fires. first is
// the pause of a first wake-up in a row, and fresh makes this one a first
// (see woke).
func (b *waitBase) rest(ctx context.Context, wait time.Duration, wake <-chan struct{}, grant <-chan *Lock, first func() time.Duration, fresh bool, err error) (*Lock, error) {
	b.c.cfg.logger.Debug("redlock: retrying", "resource", b.resource, "wait", wait, "err", err)
	// What is ready already is taken in an order of its own, not by a
	// select that picks one at random (a seed of the simulator replays its
	// trace only if the order is fixed): a lock handed to us first.
	select {
	case h := <-grant:
		b.woken = 0
		return h, nil
	default:
	}
	if wait <= 0 {
		// At once (the holders' keys are gone from a majority): a
		// release since is no news to the attempt, which reads the masters.
		if wake != nil {
			select {
			case <-wake:
			default:
			}
		}
		b.woken = 0
		if cerr := ctx.Err(); cerr != nil {
			return nil, errors.Join(err, cerr)
		}
		return nil, nil
	}
	select {
	case <-wake:
		return b.woke(ctx, grant, first, fresh, err)
	default:
	}
	b.arm(wait)
	select {
	case <-b.timer.C:
		b.woken = 0
	case <-wake:
		return b.woke(ctx, grant, first, fresh, err)
	case h := <-grant:
		b.woken = 0
		return h, nil
	case <-ctx.Done():
		return nil, errors.Join(err, ctx.Err())
	}
	return nil, nil
}

// woke follows a release that cut the sleep short. The first one in a
// row (or a fresh one: the plain policy's attempt that lost at its probe
// master to the one waiter that won it, with no votes split) waits first()
// (the plain policy's probe jitter; nothing for the others) and goes to an
// attempt: the fastest way to a released lock.
// When the attempt it led to lost as well, the releases may be those of
// other waiters that lost with us (the votes split): each next one waits
// a random part of a window that grows by wakeJitter per wake, up to
// maxWakeBackoff, so that the waiters stop trying in step. Without it, two
// waiters whose attempts kept splitting the masters woke each other for
// ever, in the simulator in one instant of virtual time.
func (b *waitBase) woke(ctx context.Context, grant <-chan *Lock, first func() time.Duration, fresh bool, err error) (*Lock, error) {
	var wait time.Duration
	if b.woken++; fresh {
		b.woken = 1
	}
	if b.woken == 1 {
		if first != nil {
			wait = first()
		}
	} else {
		wait = randN(b.rnd, min(time.Duration(b.woken-1)*wakeJitter, maxWakeBackoff))
	}
	if wait <= 0 {
		return nil, nil
	}
	select {
	case h := <-grant: // see rest
		b.woken = 0
		return h, nil
	default:
	}
	b.arm(wait)
	select {
	case <-b.timer.C:
	case h := <-grant:
		b.woken = 0
		return h, nil
	case <-ctx.Done():
		return nil, errors.Join(err, ctx.Err())
	}
	return nil, nil
}

// arm sets the call's timer to fire after wait.
func (b *waitBase) arm(wait time.Duration) {
	if b.timer == nil {
		b.timer = time.NewTimer(wait)
	} else {
		b.timer.Reset(wait)
	}
}

// end stops the timer and tells the Waiting hook that the call waits no
// more.
func (b *waitBase) end() {
	if b.timer != nil {
		b.timer.Stop()
	}
	if b.waiting {
		b.c.cfg.hooks.Waiting(-1)
	}
}

// pollWait is a LockAll call: it polls at the retry delay. The release of
// one of its resources does not wake it.
type pollWait struct {
	waitBase
	resources []string
}

func (p *pollWait) try(ctx context.Context) (*Lock, *quorum.Round, error, bool) {
	l, _ := p.c.newMulti(p.resources, p.ttl, p.rnd) // checked by LockAll
	l, round, err := p.c.attemptLock(ctx, l, p.ttl, nil)
	return l, round, err, true
}

func (p *pollWait) sleep(ctx context.Context, _ *quorum.Round, err error) error {
	_, err = p.rest(ctx, p.poll(), nil, nil, nil, false, err)
	return err
}

func (p *pollWait) end(context.Context) { p.waitBase.end() }
