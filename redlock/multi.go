package redlock

import (
	"context"
	_ "embed"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/redlock/internal/wait"
)

// TryLockAll makes one attempt to lock all of resources for ttl, all or
// nothing: won where a majority of masters set every key. With [WithFence] each
// resource gets its own fence ([Lock.Fences]); the Lock releases and extends
// them together. An empty set, a duplicate, a bad resource, or resources a
// Redis Cluster master would hash to different slots are [ErrInvalidArgument].
func (c *Client) TryLockAll(ctx context.Context, resources []string, ttl time.Duration) (*Lock, error) {
	l, err := c.newMulti(resources, ttl, c.stream())
	if err != nil {
		return nil, err
	}
	return c.observeAcquire(ctx, "", resources, func(ctx context.Context) (*Lock, error) {
		if err := ctx.Err(); err != nil {
			return nil, c.notAttempted(ctx, err)
		}
		l, _, err := c.attemptLock(ctx, l, ttl, nil)
		return l, err
	})
}

// LockAll is [Client.TryLockAll] with retries after the retry delay and
// jitter of [WithRetry], until it wins, the attempts are spent or ctx ends.
// It polls: the release of one resource does not wake it.
func (c *Client) LockAll(ctx context.Context, resources []string, ttl time.Duration) (*Lock, error) {
	if _, err := c.newMulti(resources, ttl, nil); err != nil {
		return nil, err
	}
	return c.observeAcquire(ctx, "", resources, func(ctx context.Context) (*Lock, error) {
		joined := strings.Join(resources, ",")
		return c.wait(ctx, joined, func() (wait.Waiter[*Lock], error) {
			return &pollWait{Base: c.newBase(joined, ttl), c: c, resources: resources}, nil
		})
	})
}

// newMulti checks resources and makes the Lock an attempt fills in.
func (c *Client) newMulti(resources []string, ttl time.Duration, rnd *rand.Rand) (*Lock, error) {
	if len(resources) == 0 {
		return nil, invalid("no resources")
	}
	sorted := slices.Clone(resources)
	slices.Sort(sorted)
	for i, r := range sorted {
		if err := c.check(r, ttl); err != nil {
			return nil, err
		}
		if i > 0 && r == sorted[i-1] {
			return nil, invalid("resource %q given twice", r)
		}
	}
	if c.cluster && !sameHashTag(sorted) {
		return nil, invalid("resources %q: a Redis Cluster master runs a script only on keys of one slot; give them one hash tag, e.g. {order:42}:sku:1", sorted)
	}
	l := newLock(c, sorted[0], wait.NewToken(rnd))
	if len(sorted) > 1 {
		l.multi, l.fences = sorted, make([]uint64, len(sorted))
		l.keys = make([]string, len(sorted))
		for i, r := range sorted {
			l.keys[i] = "lock:" + r
		}
	}
	return l, nil
}

// acquireAll runs acquire_all.lua on master m: true when it set every key,
// false when some key was held.
func acquireAll(ctx context.Context, m driver.Conn, keys []string, args []any) (bool, error) {
	n, err := wait.EvalInt(ctx, m, acquireAllScript, keys, args...)
	return err == nil && n == 1, err
}

// sameHashTag reports whether every resource's lock key has the same
// non-empty hash tag, the part between the first { and the next }: then
// Redis Cluster hashes them to one slot.
func sameHashTag(resources []string) bool {
	tag := func(key string) string {
		i := strings.IndexByte(key, '{')
		if i < 0 {
			return ""
		}
		j := strings.IndexByte(key[i+1:], '}')
		if j <= 0 {
			return ""
		}
		return key[i+1 : i+1+j]
	}
	first := tag("lock:" + resources[0])
	if first == "" {
		return false
	}
	for _, r := range resources[1:] {
		if tag("lock:"+r) != first {
			return false
		}
	}
	return true
}
