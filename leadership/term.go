package leadership

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"quorumlock.dev/redlock"
)

// Term is one candidate's time as leader, from its election to the end of
// its context. It is safe for concurrent use. Its one goroutine (the health
// check, and the release when the term ends) ends with the term.
type Term struct {
	e      *Election
	lk     *redlock.Lock
	fence  uint64
	record string

	ctx     context.Context
	cancel  context.CancelCauseFunc
	stopped chan struct{} // closed when the term's goroutine has released the lock
}

func newTerm(e *Election, lk *redlock.Lock, fence uint64) *Term {
	ctx, cancel := context.WithCancelCause(lk.Context())
	return &Term{
		e:       e,
		lk:      lk,
		fence:   fence,
		record:  record{token: lk.Token(), fence: fence, identity: e.cfg.identity}.String(),
		ctx:     ctx,
		cancel:  cancel,
		stopped: make(chan struct{}),
	}
}

// Fence is the term's fence, minted after the election: larger than the
// fence of every earlier term of the role. Every write the leader makes to
// guarded storage carries it.
func (t *Term) Fence() uint64 { return t.fence }

// Identity is the leader's identity, as [Election.Leader] reports it.
func (t *Term) Identity() string { return t.e.cfg.identity }

// Role is the role the term leads.
func (t *Term) Role() string { return t.e.role }

// Context is cancelled when the term ends on this side: at the end of the
// lock's lease on the local clock (before another candidate can be
// elected, unless the process was paused or a master's clock jumped), at
// once when a renewal or the health check fails, or at Resign.
// context.Cause says why: [ErrResigned], an error wrapping [ErrUnhealthy],
// or one wrapping redlock.ErrLockLost (redlock.ErrNoProgress, a failed
// extension, the lease ran out).
func (t *Term) Context() context.Context { return t.ctx }

// Done is Context().Done().
func (t *Term) Done() <-chan struct{} { return t.ctx.Done() }

// Progress records that the leader moves its work forward: the lock is
// extended only when Progress was called since the last extension (or a
// health check of [WithHealth] passed). A leader that stops calling it
// loses the term within a TTL.
func (t *Term) Progress() { t.lk.Progress() }

// Resign ends the term: its context is cancelled first, then the identity
// record is withdrawn and the lock released at once, which wakes the next
// candidate. It returns once that is done, nil also for a term that had
// already ended (context.Cause of [Term.Context] says why: [ErrResigned]
// only after Resign), or ctx's error when ctx ends first (the release goes
// on, each call bounded by the node timeout).
func (t *Term) Resign(ctx context.Context) error {
	t.cancel(ErrResigned)
	select {
	case <-t.stopped:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("leadership: resign %q: %w", t.e.role, ctx.Err())
	}
}

func (t *Term) start() {
	if h := t.e.cfg.hooks.TermStarted; h != nil {
		h(t.e.role, t.fence)
	}
	go t.run()
}

// run checks health while the term lasts, then releases what the term held.
func (t *Term) run() {
	defer close(t.stopped)
	var tick <-chan time.Time
	every := t.e.cfg.ttl / 5
	if t.e.cfg.health != nil {
		ticker := time.NewTicker(every)
		defer ticker.Stop()
		tick = ticker.C
	}
	for {
		select {
		case <-t.ctx.Done():
			t.end(context.Cause(t.ctx))
			return
		case <-tick:
			t.checkHealth(every)
		}
	}
}

func (t *Term) checkHealth(bound time.Duration) {
	ctx, cancel := context.WithTimeout(t.ctx, bound)
	err := t.e.cfg.health(ctx)
	cancel()
	switch {
	case t.ctx.Err() != nil:
		// The term ended meanwhile: run reports that.
	case err == nil:
		t.lk.Progress()
	default:
		t.cancel(fmt.Errorf("%w: %w", ErrUnhealthy, err))
	}
}

// end runs once the term's context ended: the hooks first, so that a
// gauge drops before anyone else can lead (but for the lease running out,
// which frees the role when the masters' keys expire), then the record is
// withdrawn and the lock released, both at once.
func (t *Term) end(cause error) {
	h := t.e.cfg.hooks
	if !errors.Is(cause, ErrResigned) && h.RenewalFailed != nil {
		h.RenewalFailed(t.e.role, cause)
	}
	if h.TermEnded != nil {
		h.TermEnded(t.e.role, t.fence, cause)
	}
	// The record and the lock at once: the release wakes the next
	// candidate, which need not wait for the record's round (the withdraw
	// deletes only a record that is still ours, and Leader believes a
	// record only where it carries the lock's current token, so the order
	// does not matter). Both are bounded by the node timeout whatever the
	// context; after a loss the Unlock frees what keys are left.
	var withdrawn sync.WaitGroup
	withdrawn.Go(func() { t.e.withdraw(t.record) })
	_ = t.lk.Unlock(context.Background())
	withdrawn.Wait()
}
