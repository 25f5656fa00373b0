package redlock

import (
	"context"
	"math/rand/v2"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/quorum"
	"quorumlock.dev/redlock/internal/push"
	"quorumlock.dev/redlock/internal/wait"
)

// policyCore is the Client as its wait policies see it (plain.Core and
// fair.Core): the round, the per-master call, the masters' state and a
// lock's keys and lease, nothing of the public API.
type policyCore struct{ c *Client }

func (p policyCore) Masters() int               { return len(p.c.masters) }
func (p policyCore) Quorum() int                { return p.c.quorum }
func (p policyCore) NodeTimeout() time.Duration { return p.c.cfg.nodeTimeout }
func (p policyCore) Hub() *push.Hub             { return p.c.push }
func (p policyCore) Stream() *rand.Rand         { return p.c.stream() }
func (p policyCore) WaitConfig() wait.Config    { return p.c.waitConfig() }

func (p policyCore) Probeable(i int) bool {
	return !p.c.health[i].FailedLast() && !p.c.watcher.Quarantined(i)
}

func (p policyCore) NewLock(resource, token string) *Lock { return newLock(p.c, resource, token) }

func (p policyCore) Attempt(ctx context.Context, l *Lock, ttl time.Duration, a wait.Asker[*Lock]) (*Lock, *quorum.Round, error) {
	return p.c.attemptLock(ctx, l, ttl, a)
}

func (p policyCore) SetNX(ctx context.Context, i int, l *Lock, ttl time.Duration) (bool, error) {
	return p.c.setNX(ctx, i, l, ttl)
}

func (p policyCore) Enter(ctx context.Context, i int) (bool, error) {
	return p.c.enter(ctx, i)
}

func (p policyCore) Exit(ctx context.Context, i int, probe bool, err error) {
	p.c.exit(ctx, i, probe, err)
}
func (p policyCore) Master(i int) driver.Conn { return p.c.masters[i] }

func (p policyCore) Holders(ctx context.Context, round *quorum.Round, key string) []push.Holder {
	return p.c.readHolders(ctx, round, key, false)
}

func (p policyCore) Now() (time.Time, time.Duration)       { return p.c.clock.now() }
func (p policyCore) Lease(ttl time.Duration) time.Duration { return p.c.lease(ttl) }
func (p policyCore) Quarantined(i int) bool                { return p.c.watcher.Quarantined(i) }
func (p policyCore) Issued(ttl time.Duration)              { p.c.watcher.Issued(ttl) }

// Attempted tells the Attempt hook of a lock handed to a waiter by a
// round of the policy's, not the waiter's own attempt: its caller's
// context is not at hand.
func (p policyCore) Attempted(took, validity time.Duration) {
	if attempt := p.c.cfg.hooks.Attempt; attempt != nil {
		attempt(context.Background(), Event{Outcome: acquireOutcome(nil), Took: took, Validity: validity})
	}
}

func (p policyCore) Hold(l *Lock, round *quorum.Round, until time.Time, untilBoot, ttl time.Duration) {
	l.round, l.until, l.untilBoot, l.ttl = round, until, untilBoot, ttl
}

func (p policyCore) Pass(l *Lock, until time.Time, untilBoot time.Duration) *Lock {
	return &Lock{c: p.c, resource: l.resource, key: l.key, keys: l.keys, token: l.token, args: l.args,
		round: l.round, until: until, untilBoot: untilBoot, ttl: l.ttl}
}

func (p policyCore) Keys(l *Lock) []string       { return l.keys }
func (p policyCore) Round(l *Lock) *quorum.Round { return l.round }
func (p policyCore) TTL(l *Lock) time.Duration   { return l.ttl }
func (p policyCore) Kept(l *Lock) any            { return l.kept }
func (p policyCore) Over(until time.Time, untilBoot time.Duration) bool {
	return overAt(p.c.clock, until, untilBoot)
}

func (p policyCore) Until(l *Lock) (time.Time, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until, l.untilBoot
}

// Mint takes l's fence, when the client has a counter.
func (p policyCore) Mint(ctx context.Context, l *Lock, deadline time.Time) error {
	if p.c.cfg.minter == nil {
		return nil
	}
	return p.c.mint(ctx, l, deadline)
}

// Queued: the refusals of l's attempt set nothing, so its release skips
// those masters, and a loss is undone by undo where it agreed.
func (p policyCore) Queued(l *Lock, undo wait.Script) { l.refusedClean, l.undo = true, &undo }

func (p policyCore) Keep(l *Lock, kept any, release *wait.Script) {
	l.kept, l.releaseBy = kept, release
}

func (p policyCore) Abandon(ctx context.Context, l *Lock, after func()) { l.abandon(ctx, after) }

func (p policyCore) AbandonRound(ctx context.Context, l *Lock) { p.c.abandon(ctx, l.round, l) }

func (p policyCore) Do(ctx context.Context, call quorum.Call) *quorum.Round {
	return p.c.group.Do(ctx, call)
}

func (p policyCore) Vote(i int, agreed bool, err error) (bool, error) {
	return p.c.vote(i, agreed, err)
}

func (p policyCore) ReleaseOne(ctx context.Context, l *Lock, i int) (bool, error) {
	var r release
	l.releaseOne(ctx, i, &r)
	switch r.state.Load() {
	case releasedHeld:
		return true, nil
	case releasedNotOurs:
		return false, nil
	}
	if err := r.err(); err != nil {
		return false, err
	}
	return false, quorum.ErrTimeout
}

func (p policyCore) RetryRelease(l *Lock, i int) {
	script, args := l.releaser()
	p.c.retryRelease(l, i, script, args)
}

func (p policyCore) RetryScript(i int, script *driver.Script, keys []string, args []any, ttl time.Duration, resource string) {
	p.c.retryScript(i, script, keys, args, ttl, resource)
}

func (p policyCore) Go(f func()) { p.c.background(f) }

func (p policyCore) NeverSent(i int, err error) bool { return p.c.neverSent(i, err) }

func (p policyCore) MasterError(i int, op string, err error) error {
	return p.c.masterError(i, op, err)
}

// waitConfig is what a waiter's wait.Base reads of the client.
func (c *Client) waitConfig() wait.Config {
	return wait.Config{Delay: c.cfg.delay, Jitter: c.cfg.jitter, Waiting: c.cfg.hooks.Waiting, Logger: c.cfg.logger}
}

// newBase is the wait.Base of a Lock call on resource for ttl.
func (c *Client) newBase(resource string, ttl time.Duration) wait.Base[*Lock] {
	return wait.Base[*Lock]{Config: c.waitConfig(), Resource: resource, TTL: ttl, Rnd: c.stream()}
}
