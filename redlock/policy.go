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

// policyCore is the Client as its wait policies see it (package plain's
// Core): the round, the per-master call and the masters' state, nothing of
// the public API.
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

func (p policyCore) NewLock(resource string, rnd *rand.Rand) *Lock {
	return newLock(p.c, resource, newToken(rnd))
}

func (p policyCore) Attempt(ctx context.Context, l *Lock, ttl time.Duration, a wait.Asker[*Lock]) (*Lock, *quorum.Round, error) {
	return p.c.attemptLock(ctx, l, ttl, a)
}

func (p policyCore) SetNX(ctx context.Context, i int, l *Lock, ttl time.Duration) (bool, error) {
	return p.c.setNX(ctx, i, l, ttl)
}

func (p policyCore) Call(ctx context.Context, i int, f func(context.Context, driver.Conn) error) error {
	_, err := call(p.c, ctx, i, func(ctx context.Context, m driver.Conn) (struct{}, error) {
		return struct{}{}, f(ctx, m)
	})
	return err
}

func (p policyCore) Holders(ctx context.Context, round *quorum.Round, key string) []push.Holder {
	return p.c.readHolders(ctx, round, key, false)
}

// waitConfig is what a waiter's wait.Base reads of the client.
func (c *Client) waitConfig() wait.Config {
	return wait.Config{Delay: c.cfg.delay, Jitter: c.cfg.jitter, Waiting: c.cfg.hooks.Waiting, Logger: c.cfg.logger}
}

// newBase is the wait.Base of a Lock call on resource for ttl.
func (c *Client) newBase(resource string, ttl time.Duration) wait.Base[*Lock] {
	return wait.Base[*Lock]{Config: c.waitConfig(), Resource: resource, TTL: ttl, Rnd: c.stream()}
}
