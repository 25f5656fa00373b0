package fence

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"quorumlock.dev/internal/nilcheck"
)

// Incrementer is the part of a Redis client that a [RedisCounter] needs.
// *redis.Client, *redis.Ring and *redis.ClusterClient satisfy it.
type Incrementer interface {
	Incr(ctx context.Context, key string) *redis.IntCmd
}

var (
	_ Incrementer = (*redis.Client)(nil)
	_ Incrementer = (*redis.Ring)(nil)
	_ Incrementer = (*redis.ClusterClient)(nil)
)

// DefaultTimeout bounds one INCR when the caller's context has no earlier
// deadline.
const DefaultTimeout = 250 * time.Millisecond

// RedisCounter mints tokens with INCR fence:<resource> on one Redis node.
// It is safe for concurrent use.
type RedisCounter struct {
	node    Incrementer
	timeout time.Duration
}

var _ Minter = (*RedisCounter)(nil)

// CounterOption configures a counter.
type CounterOption func(*RedisCounter)

// WithTimeout bounds each INCR (default [DefaultTimeout]). The counter
// enforces it itself, because go-redis ignores context deadlines unless the
// client was built with ContextTimeoutEnabled.
func WithTimeout(d time.Duration) CounterOption {
	return func(c *RedisCounter) { c.timeout = d }
}

// NewRedisCounter returns a counter on node, which must not be one of the
// lock's masters.
func NewRedisCounter(node Incrementer, opts ...CounterOption) (*RedisCounter, error) {
	if nilcheck.Is(node) {
		return nil, fmt.Errorf("%w: nil counter node", ErrInvalidArgument)
	}
	c := &RedisCounter{node: node, timeout: DefaultTimeout}
	for _, opt := range opts {
		opt(c)
	}
	if c.timeout <= 0 {
		return nil, fmt.Errorf("%w: timeout %v is not positive", ErrInvalidArgument, c.timeout)
	}
	return c, nil
}

// Node is the client of the node the counter lives on. The redlock package
// uses it to refuse a counter that lives on one of the lock's masters.
func (c *RedisCounter) Node() Incrementer { return c.node }

// Mint increments the counter of resource and returns its new value. It
// returns within the counter's timeout or ctx's deadline, whichever is
// earlier; an INCR that was sent but not answered in time may still be
// applied by the server later, which leaves a gap in the sequence but never
// a repeat.
func (c *RedisCounter) Mint(ctx context.Context, resource string) (uint64, error) {
	if resource == "" {
		return 0, fmt.Errorf("%w: empty resource", ErrInvalidArgument)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	wait := c.timeout
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl); left < wait {
			wait = left
		}
	}
	type reply struct {
		n   int64
		err error
	}
	ch := make(chan reply, 1)
	go func() {
		n, err := c.node.Incr(ctx, Key(resource)).Result()
		ch <- reply{n, err}
	}()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case r := <-ch:
		if r.err != nil {
			return 0, fmt.Errorf("fence: INCR %s: %w", Key(resource), r.err)
		}
		if r.n <= 0 {
			return 0, fmt.Errorf("%w: INCR %s gave %d", ErrCounter, Key(resource), r.n)
		}
		return uint64(r.n), nil
	case <-timer.C:
		return 0, fmt.Errorf("fence: INCR %s: no answer within %v: %w", Key(resource), wait, context.DeadlineExceeded)
	case <-ctx.Done():
		return 0, fmt.Errorf("fence: INCR %s: %w", Key(resource), ctx.Err())
	}
}
