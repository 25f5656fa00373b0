package fence

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"quorumlock.dev/internal/nilcheck"
)

// Incrementer is the part of a Redis client that a [RedisCounter] needs.
// *redis.Client, *redis.Ring and *redis.ClusterClient satisfy it.
//
// [RedisCounter.CheckDurability] and [RedisCounter.Seed] need more (CONFIG
// GET, scripts); they look for it at run time, so that a counter on a node
// that refuses those commands can still mint.
type Incrementer interface {
	Incr(ctx context.Context, key string) *redis.IntCmd
}

var (
	_ Incrementer = (*redis.Client)(nil)
	_ Incrementer = (*redis.Ring)(nil)
	_ Incrementer = (*redis.ClusterClient)(nil)
)

var (
	// ErrNotDurable reports a counter node that may lose acknowledged
	// INCRs, or whose settings could not be read to rule that out. A node
	// that loses them restarts with smaller counters, and storage then
	// refuses every honest writer.
	ErrNotDurable = errors.New("fence: counter node may lose fences")
	// ErrCounterRegressed reports a counter that answered with a value no
	// larger than one this process had already minted for the resource: the
	// node restarted without its data, or someone reset the key. No fence is
	// returned with it. Seed the counter from the storage
	// ([RedisCounter.Seed]) and make the node durable before minting again.
	ErrCounterRegressed = errors.New("fence: counter went backwards: it restarted empty or was reset")
)

// DefaultTimeout bounds one call to the counter node (one INCR, one seed,
// one durability check) when the caller's context has no earlier deadline.
const DefaultTimeout = 250 * time.Millisecond

var (
	//go:embed scripts/seed.lua
	seedLua    string
	seedScript = redis.NewScript(seedLua)
)

// RedisCounter mints tokens with INCR fence:<resource> on one Redis node.
// It is safe for concurrent use.
//
// It remembers, for each resource, the largest value it minted, so that a
// counter that went backwards is reported ([ErrCounterRegressed]) instead of
// handing out a fence that was handed out before. That memory is never
// freed: it grows with the number of distinct resources minted in the
// process, by a few tens of bytes plus the length of the name for each.
type RedisCounter struct {
	node    Incrementer
	timeout time.Duration

	// mu guards the map, not the marks in it: a resource seen before costs a
	// read lock and an atomic, and no allocation.
	mu     sync.RWMutex
	minted map[string]*atomic.Uint64
}

var _ Minter = (*RedisCounter)(nil)

// CounterOption configures a counter.
type CounterOption func(*RedisCounter)

// WithTimeout bounds each call to the counter node (default
// [DefaultTimeout]). The counter enforces it itself, because go-redis
// ignores context deadlines unless the client was built with
// ContextTimeoutEnabled.
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
//
// A value no larger than one this counter already minted for resource gives
// [ErrCounterRegressed] and no fence. Only a counter object that minted
// before the regression can see it: after a restart of this process, the
// first symptom is storage that refuses every write ([ErrFenceRejected]).
func (c *RedisCounter) Mint(ctx context.Context, resource string) (uint64, error) {
	if resource == "" {
		return 0, fmt.Errorf("%w: empty resource", ErrInvalidArgument)
	}
	key := Key(resource)
	mark := c.mark(resource)
	// Read before the INCR is sent: only values minted before it bind its
	// answer. A concurrent Mint may be answered later with a smaller value,
	// which is not a regression.
	floor := mark.Load()
	n, err := bounded(ctx, c.timeout, incr, incrCall{c.node, key})
	if err != nil {
		return 0, fmt.Errorf("fence: INCR %s: %w", key, err)
	}
	if n <= 0 {
		return 0, fmt.Errorf("%w: INCR %s gave %d", ErrCounter, key, n)
	}
	v := uint64(n)
	if v <= floor {
		return 0, fmt.Errorf("%w: INCR %s gave %d, after this process had minted %d", ErrCounterRegressed, key, v, floor)
	}
	for {
		old := mark.Load()
		if v <= old || mark.CompareAndSwap(old, v) {
			return v, nil
		}
	}
}

// mark returns the largest value minted for resource, creating it at 0.
func (c *RedisCounter) mark(resource string) *atomic.Uint64 {
	c.mu.RLock()
	m := c.minted[resource]
	c.mu.RUnlock()
	if m != nil {
		return m
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if m = c.minted[resource]; m == nil {
		if c.minted == nil {
			c.minted = make(map[string]*atomic.Uint64)
		}
		m = new(atomic.Uint64)
		// A copy, so that the map does not keep alive a larger buffer the
		// caller's string may point into.
		c.minted[strings.Clone(resource)] = m
	}
	return m
}

type incrCall struct {
	node Incrementer
	key  string
}

func incr(ctx context.Context, a incrCall) (int64, error) { return a.node.Incr(ctx, a.key).Result() }

// configReader is what [RedisCounter.CheckDurability] needs beyond
// [Incrementer]. It is not part of Incrementer because managed Redis services
// often rename or disable CONFIG, and such a node can still count.
type configReader interface {
	ConfigGet(ctx context.Context, parameter string) *redis.MapStringStringCmd
}

var _ configReader = (*redis.Client)(nil)

// durable lists the settings under which a node keeps every INCR it
// acknowledged: each write reaches the append-only file, fsynced, before the
// reply, and a full memory refuses writes rather than evicting counters.
var durable = [...]struct{ name, want string }{
	{"appendonly", "yes"},
	{"appendfsync", "always"},
	{"maxmemory-policy", "noeviction"},
}

// CheckDurability reads appendonly, appendfsync and maxmemory-policy on the
// counter node with CONFIG GET. It returns nil only when they are yes,
// always and noeviction. Otherwise the error wraps [ErrNotDurable] and names,
// on one line, each setting that is wrong and the value it needs; it also
// wraps ErrNotDurable when the settings could not be read (a node that
// refuses CONFIG, as managed services often do, a client without ConfigGet,
// a timeout), since durability is then unproven. Run it at startup. The
// three reads together are bounded like [RedisCounter.Mint].
func (c *RedisCounter) CheckDurability(ctx context.Context) error {
	node, ok := c.node.(configReader)
	if !ok {
		return fmt.Errorf("%w: its settings could not be read: %T has no ConfigGet method", ErrNotDurable, c.node)
	}
	got, err := bounded(ctx, c.timeout, readConfig, node)
	if err != nil {
		return fmt.Errorf("%w: its settings could not be read: %w", ErrNotDurable, err)
	}
	var wrong []string
	for _, s := range durable {
		if v := got[s.name]; !strings.EqualFold(v, s.want) {
			wrong = append(wrong, fmt.Sprintf("%s is %q, want %q", s.name, v, s.want))
		}
	}
	if len(wrong) > 0 {
		return fmt.Errorf("%w: %s", ErrNotDurable, strings.Join(wrong, ", "))
	}
	return nil
}

func readConfig(ctx context.Context, node configReader) (map[string]string, error) {
	got := make(map[string]string, len(durable))
	for _, s := range durable {
		m, err := node.ConfigGet(ctx, s.name).Result()
		if err != nil {
			return nil, fmt.Errorf("CONFIG GET %s: %w", s.name, err)
		}
		v, ok := m[s.name]
		if !ok {
			return nil, fmt.Errorf("CONFIG GET %s: no such setting", s.name)
		}
		got[s.name] = v
	}
	return got, nil
}

// Seed raises the counter of resource to at least atLeast, and never lowers
// it, atomically (one script). It is the repair after a counter node lost its
// data: for each resource, seed the counter from the largest fence the
// storage holds, so that the next Mint is above every fence storage has seen
// and honest writers are admitted again. It never seeds below the largest
// value this counter minted for resource, since those fences were handed out
// even if they never reached storage. The counter node must implement
// [redis.Scripter] (*redis.Client does); otherwise Seed returns
// [ErrInvalidArgument]. It is bounded like [RedisCounter.Mint].
func (c *RedisCounter) Seed(ctx context.Context, resource string, atLeast uint64) error {
	if resource == "" {
		return fmt.Errorf("%w: empty resource", ErrInvalidArgument)
	}
	if atLeast > math.MaxInt64 {
		return fmt.Errorf("%w: seed %d is above what INCR can count to", ErrInvalidArgument, atLeast)
	}
	node, ok := c.node.(redis.Scripter)
	if !ok {
		return fmt.Errorf("%w: counter node %T cannot run scripts (redis.Scripter)", ErrInvalidArgument, c.node)
	}
	key := Key(resource)
	floor := max(atLeast, c.mark(resource).Load())
	if _, err := bounded(ctx, c.timeout, seed, seedCall{node, key, floor}); err != nil {
		return fmt.Errorf("fence: seed %s to %d: %w", key, floor, err)
	}
	return nil
}

type seedCall struct {
	node  redis.Scripter
	key   string
	floor uint64
}

func seed(ctx context.Context, a seedCall) (any, error) {
	return seedScript.Run(ctx, a.node, []string{a.key}, a.floor).Result()
}

type answer[T any] struct {
	v   T
	err error
}

// bounded returns call(ctx, arg), or gives up after limit (no limit when 0)
// or when ctx ends. go-redis ignores context deadlines unless the client was
// built with ContextTimeoutEnabled, so the bound is enforced here, with the
// call on a goroutine of its own. A call given up keeps running and its answer
// is dropped: the server may still execute the command.
//
// call and arg come apart, rather than as one closure, so that the
// goroutine's closure is the only one allocated.
func bounded[A, T any](ctx context.Context, limit time.Duration, call func(context.Context, A) (T, error), arg A) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	var expired <-chan time.Time
	if limit > 0 {
		timer := time.NewTimer(limit)
		defer timer.Stop()
		expired = timer.C
	} else if ctx.Done() == nil {
		// Nothing could end the wait early.
		return call(ctx, arg)
	}
	ch := make(chan answer[T], 1)
	go func() {
		v, err := call(ctx, arg)
		ch <- answer[T]{v, err}
	}()
	select {
	case a := <-ch:
		return a.v, a.err
	case <-expired:
		return zero, fmt.Errorf("no answer within %v: %w", limit, context.DeadlineExceeded)
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}
