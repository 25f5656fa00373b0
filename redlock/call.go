package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/quorum"
	"quorumlock.dev/redlock/internal/wait"
)

// call is one call to master i: f on its connection, through the master's
// breaker. When the breaker holds the call back, f is not called and the
// error is errStuck; otherwise the breaker records f's outcome (see exit).
func call[T any](c *Client, ctx context.Context, i int, f func(context.Context, driver.Conn) (T, error)) (T, error) {
	return wait.Call(policyCore{c}, ctx, i, f)
}

// vote is master i's vote in an acquisition whose call returned agreed and
// err. A key set on a quarantined master (see watch.Watcher) stays set, so
// that the master knows the holder and the release reaches it, but its
// vote is not counted: errQuarantined.
func (c *Client) vote(i int, agreed bool, err error) (bool, error) {
	switch {
	case agreed && c.watcher.Quarantined(i):
		return false, errQuarantined
	case err != nil:
		return false, err
	}
	return agreed, nil
}

// enter passes master i's breaker before a call on ctx: an error means the
// call must not be made: the master is stuck ([errStuck]) or refuses
// connections (see refusing). A call that comes while the breaker's probe
// is in flight waits for the probe, at most until ctx ends, and goes ahead
// if it got a reply. Without an error, exit follows with the same probe
// and the call's error.
func (c *Client) enter(ctx context.Context, i int) (probe bool, err error) {
	for {
		ok, p, probing := c.health[i].Enter(c.nanos(), int64(c.cfg.nodeTimeout))
		if ok {
			probe = p
			break
		}
		if probing == nil {
			return false, errStuck
		}
		select {
		case <-probing:
		case <-ctx.Done():
			return false, errStuck
		}
	}
	if err := c.refusing(ctx, i); err != nil {
		c.exit(ctx, i, probe, err)
		return false, err
	}
	return probe, nil
}

// refusing is the check before a call to master i whose last failure, with
// no reply since, was a refused connection: one dial of its address,
// bounded by ctx and the node timeout. Refused again: the call is not made
// and fails at once with the refusal ([errRefused]), where the Redis
// client would redial until the node timeout ended the call (go-redis
// v9.23 dials up to 5 times, 100 ms apart) and report that it did not
// answer in time. A dial that connects, or fails otherwise, lets the call
// go ahead. A master that answers costs nothing here.
func (c *Client) refusing(ctx context.Context, i int) error {
	h := &c.health[i]
	f := h.lastFailure.Load()
	if f == nil || !f.refused || f.at <= h.LastReply() || c.dialAddrs[i] == "" {
		return nil
	}
	d := net.Dialer{Timeout: c.cfg.nodeTimeout}
	conn, err := d.DialContext(ctx, "tcp", c.dialAddrs[i])
	if err == nil {
		_ = conn.Close()
		h.lastFailure.CompareAndSwap(f, nil) // it listens again: let the call tell
		return nil
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return nil
	}
	return fmt.Errorf("%w: %w", errRefused, err)
}

// exit records that a call to master i on ctx (a round's) returned err. A
// call that got no reply because the caller's own context ended, not the
// round's deadline, says nothing of the master: go-redis gives up such a
// call before it takes a connection. It counts neither way.
func (c *Client) exit(ctx context.Context, i int, probe bool, err error) {
	h := &c.health[i]
	if callerEnded(ctx, err) {
		h.Abstain(probe)
		return
	}
	ok := driver.Replied(err)
	now := c.nanos()
	switch {
	case ok:
		c.retries.Replied(i)
	case ctx.Err() == nil:
		// A failure of the master's own, not the round's deadline: a cause
		// worth telling in the errors of the calls that time out after it.
		h.lastFailure.Store(newFailure(err, now))
	default:
		// The round's deadline: go-redis may be redialling a refused port
		// in the background, and says so only in its log.
		c.diagnose(i, now)
	}
	if h.Exit(now, probe, ok) {
		c.watcher.Suspect(i)
	}
}

// masterError is the error of op on master i. A call that did not answer
// in time, or that the breaker held back, says why the master last failed
// when it has not replied since: a timeout alone would hide a refused port
// behind go-redis's redials.
func (c *Client) masterError(i int, op string, err error) *MasterError {
	if errors.Is(err, quorum.ErrTimeout) || errors.Is(err, errStuck) {
		h := &c.health[i]
		if f := h.lastFailure.Load(); f != nil && f.at > h.LastReply() {
			ago := time.Duration(c.nanos() - f.at).Round(time.Millisecond)
			if f.refused {
				// The cause first: a port that refuses is not a slow master.
				err = fmt.Errorf("connection refused (%w; refused %v ago: %w)", err, ago, f.err)
			} else {
				err = fmt.Errorf("%w (it last failed %v ago: %w)", err, ago, f.err)
			}
		}
	}
	return &MasterError{Addr: c.addrs[i], Op: op, Err: err}
}

// callerEnded reports a call on ctx (a round's) that failed with err
// because the caller's own context ended, not the round's deadline: err
// is the context's error. A network error of a call that went on past the
// caller's context (a read timeout, say) is still the master's.
func callerEnded(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() != nil && context.Cause(ctx) != quorum.ErrTimeout &&
		(errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
}

// diagnose dials master i's address, in the background, at most one dial
// at a time and one per node timeout, after a call to it missed the
// round's deadline: a dial that fails (a refused port, no route) is the
// cause that masterError tells. A dial that succeeds tells nothing.
func (c *Client) diagnose(i int, now int64) {
	h := &c.health[i]
	addr := c.dialAddrs[i]
	if addr == "" || now-h.lastDiagnosis.Load() < int64(c.cfg.nodeTimeout) {
		return
	}
	done := make(chan struct{})
	if !h.diagnosis.CompareAndSwap(nil, &done) {
		return
	}
	h.lastDiagnosis.Store(now)
	go func() {
		defer func() {
			h.diagnosis.Store(nil)
			close(done)
		}()
		conn, err := net.DialTimeout("tcp", addr, c.cfg.nodeTimeout)
		if err != nil {
			h.lastFailure.Store(newFailure(fmt.Errorf("a dial to see why: %w", err), c.nanos()))
			return
		}
		_ = conn.Close()
	}()
}
