package redlock

import (
	"context"
	"errors"
	"time"

	"quorumlock.dev/fence"
	"quorumlock.dev/quorum"
	"quorumlock.dev/redlock/internal/wait"
)

// Waiting between attempts is a policy that the core loop (Client.wait)
// asks, and knows nothing of (package wait says what they agree on): the
// plain one (package plain: read the holders, sleep until their keys
// expire or their release is published, ask one master first when woken
// with others), the fair one ([WithFairness], package fair: queue
// on the masters, pass the lock on within a client, hand it over between
// clients), and polling (LockAll). docs/design.md ("Waiting for a held
// lock", "Fair handoff") says why each is built as it is.

// wait is the loop of Lock and LockAll on resource (LockAll's joined):
// attempt (or take a lock handed over), then ask the waiter how to wait,
// until a win, a fatal error, the attempt cap or the end of ctx.
func (c *Client) wait(ctx context.Context, resource string, join func() (wait.Waiter[*Lock], error)) (*Lock, error) {
	if err := ctx.Err(); err != nil {
		return nil, c.notAttempted(ctx, err)
	}
	w, err := join()
	if w != nil {
		defer w.End(ctx) // also after a join that failed: a fair one may be listed
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
				return nil, c.notAttempted(ctx, err)
			}
			return nil, errors.Join(last, err)
		}
		l, round, err, tried := w.Try(ctx)
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
		if err := c.sleep(ctx, w, resource, round, err); err != nil {
			return nil, err
		}
	}
}

// sleep is w's wait after the lost attempt round (err its error), told to
// the Wait hook.
func (c *Client) sleep(ctx context.Context, w wait.Waiter[*Lock], resource string, round *quorum.Round, err error) error {
	held := errors.Is(err, ErrNotAcquired)
	hook := c.cfg.hooks.Wait
	if hook == nil {
		return w.Sleep(ctx, round, err, held)
	}
	done := hook(ctx, resource)
	start := time.Now()
	serr := w.Sleep(ctx, round, err, held)
	if done != nil {
		outcome := "woke"
		if serr != nil {
			outcome = "ended"
		}
		done(Event{Outcome: outcome, Err: err, Took: time.Since(start)})
	}
	return serr
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

// pollWait is a LockAll call: it polls at the retry delay. The release of
// one of its resources does not wake it.
type pollWait struct {
	wait.Base[*Lock]
	c         *Client
	resources []string
}

func (p *pollWait) Try(ctx context.Context) (*Lock, *quorum.Round, error, bool) {
	l, _ := p.c.newMulti(p.resources, p.TTL, p.Rnd) // checked by LockAll
	l, round, err := p.c.attemptLock(ctx, l, p.TTL, nil)
	return l, round, err, true
}

func (p *pollWait) Sleep(ctx context.Context, _ *quorum.Round, err error, _ bool) error {
	_, err = p.Rest(ctx, p.Poll(), nil, nil, nil, false, err)
	return err
}

func (p *pollWait) End(context.Context) { p.Stop() }
