package fence

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/internal/bounded"
	"quorumlock.dev/internal/bugs"
	"quorumlock.dev/internal/names"
	"quorumlock.dev/internal/nilcheck"
)

// DefaultTimeout bounds one call to the counter node (one mint, one seed,
// one durability check) when the caller's context has no earlier deadline.
const DefaultTimeout = 250 * time.Millisecond

var (
	//go:embed scripts/mint.lua
	mintLua    string
	mintScript = driver.NewScript(mintLua)
	// incrScript is the mint without its floor, for the simulator's bug hunt.
	incrScript = driver.NewScript("return redis.call('INCR', KEYS[1])")

	//go:embed scripts/seed.lua
	seedLua    string
	seedScript = driver.NewScript(seedLua)
)

// RedisCounter mints tokens on the key fence:<resource> of one Redis node,
// with one script per mint. It is safe for concurrent use.
//
// It also remembers, for each resource, the largest value it minted, as a
// second line of defence ([ErrCounterRegressed]). That memory is never
// freed: it grows with the number of distinct resources minted in the
// process, by a few tens of bytes plus the length of the name for each.
type RedisCounter struct {
	node    driver.Conn
	timeout time.Duration

	// mu guards the map, not the marks in it: a resource seen before costs a
	// read lock and atomics, and no allocation.
	mu     sync.RWMutex
	minted map[string]*mark
	swept  atomic.Int64     // when idle marks were last forgotten (see sweep), ns
	now    func() time.Time // the process's clock; tests move it
}

// mark is what a counter remembers of one resource.
type mark struct {
	minted atomic.Uint64 // the largest value minted
	// regressed is set when the node answered at or below minted: every
	// value up to the fences other processes minted may be handed out again,
	// so the resource is refused until Seed raises the counter.
	regressed atomic.Bool
	used      atomic.Int64 // when it was last minted or seeded, ns (see sweep)
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

// NewRedisCounter returns a counter on node (a go-redis client adapted by
// quorumlock.dev/driver/goredis, say), which must not be one of the lock's
// masters. A client that moves keys between servers (a *redis.Ring) gives
// [ErrInvalidArgument]: it is no single authoritative node.
// [RedisCounter.CheckDurability] needs a node with [driver.Inspector]; a
// node whose server refuses CONFIG (managed services often do) can still
// mint.
func NewRedisCounter(node driver.Conn, opts ...CounterOption) (*RedisCounter, error) {
	if nilcheck.Is(node) {
		return nil, fmt.Errorf("%w: nil counter node", ErrInvalidArgument)
	}
	if d, ok := node.(driver.Describer); ok && d.Describe().Unsafe != "" {
		return nil, fmt.Errorf("%w: the counter needs one node: %s", ErrInvalidArgument, d.Describe().Unsafe)
	}
	c := &RedisCounter{node: node, timeout: DefaultTimeout, now: time.Now}
	for _, opt := range opts {
		opt(c)
	}
	if c.timeout <= 0 {
		return nil, fmt.Errorf("%w: timeout %v is not positive", ErrInvalidArgument, c.timeout)
	}
	return c, nil
}

// Node is the node the counter lives on. The redlock package
// uses it to refuse a counter that lives on one of the lock's masters.
func (c *RedisCounter) Node() driver.Conn { return c.node }

// Mint returns the next fence of resource: its counter plus one, or, when
// the key is missing (a new resource or a lost key), the node's clock in
// microseconds. No fence repeats, across processes and losses, while the
// node's clock gains more microseconds over a key's life than the key has
// mints (docs/fencing.md). It is bounded by ctx and the counter's timeout; a
// mint given up may still be applied, which leaves a gap, never a repeat.
func (c *RedisCounter) Mint(ctx context.Context, resource string) (uint64, error) {
	if err := names.Resource(resource); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	key := Key(resource)
	m := c.mark(resource)
	// Read before the script is sent: only values minted before it bind its
	// answer. A concurrent Mint may be answered later with a smaller value,
	// which is not a regression.
	floor := m.minted.Load()
	if m.regressed.Load() {
		return 0, c.refused(key, floor)
	}
	r, err := bounded.Call(ctx, c.timeout, mint, mintCall{c.node, key})
	switch {
	case err != nil:
		return 0, fmt.Errorf("fence: mint %s: %w", key, err)
	case r.bad != "":
		return 0, fmt.Errorf("%w: %s holds no counter: %s", ErrCounter, key, r.bad)
	case r.n <= 0:
		return 0, fmt.Errorf("%w: %s gave %d", ErrCounter, key, r.n)
	}
	v := uint64(r.n)
	if v <= floor {
		m.regressed.Store(true)
		return 0, fmt.Errorf("%w: %s gave %d, after this process had minted %d; no fence is minted for it until Seed raises it", ErrCounterRegressed, key, v, floor)
	}
	if m.regressed.Load() {
		// A concurrent Mint saw the regression while this one was in flight.
		return 0, c.refused(key, floor)
	}
	for {
		old := m.minted.Load()
		if v <= old || m.minted.CompareAndSwap(old, v) {
			return v, nil
		}
	}
}

func (c *RedisCounter) refused(key string, minted uint64) error {
	return fmt.Errorf("%w: %s went back below %d, which this process had minted; no fence is minted for it until Seed raises it", ErrCounterRegressed, key, minted)
}

// mark returns what the counter remembers of resource, creating it at 0,
// and marks it used now: under the map's lock, so that sweep never forgets
// a mark a Mint has just taken.
func (c *RedisCounter) mark(resource string) *mark {
	now := c.now().UnixNano()
	c.sweep(now)
	c.mu.RLock()
	m := c.minted[resource]
	if m != nil {
		m.used.Store(now)
	}
	c.mu.RUnlock()
	if m != nil {
		return m
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if m = c.minted[resource]; m == nil {
		if c.minted == nil {
			c.minted = make(map[string]*mark)
		}
		m = new(mark)
		// A copy, so that the map does not keep alive a larger buffer the
		// caller's string may point into.
		c.minted[strings.Clone(resource)] = m
	}
	m.used.Store(now)
	return m
}

// ForgetAfter is how long a counter remembers a resource it has not minted
// or seeded for: what this process minted for it, which a later mint that
// comes back lower is checked against (ErrCounterRegressed). A resource
// whose counter went backwards is remembered until Seed raises it. So a
// process that locks per user or per order holds what it minted in the last
// ForgetAfter, not every resource it ever saw (~150 bytes each). What it
// forgets costs nothing of the fence's guarantee, which is the node's (its
// count, and its clock floor after a loss): only this process's check of
// the node against its own earlier fences, for resources idle that long.
const ForgetAfter = 10 * time.Minute

// sweep forgets, at most once a minute, the resources not used for
// ForgetAfter, into a map of its own size (a Go map does not shrink).
func (c *RedisCounter) sweep(now int64) {
	last := c.swept.Load()
	if now-last < int64(time.Minute) || !c.swept.CompareAndSwap(last, now) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	idle := 0
	for _, m := range c.minted {
		if now-m.used.Load() > int64(ForgetAfter) && !m.regressed.Load() {
			idle++
		}
	}
	if idle == 0 {
		return
	}
	kept := make(map[string]*mark, len(c.minted)-idle)
	for r, m := range c.minted {
		if now-m.used.Load() <= int64(ForgetAfter) || m.regressed.Load() {
			kept[r] = m
		}
	}
	c.minted = kept
}

// remembered is how many resources the counter remembers, for tests.
func (c *RedisCounter) remembered() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.minted)
}

type mintCall struct {
	node driver.Conn
	key  string
}

// mintReply is the script's answer: a fence, or why the key holds none.
type mintReply struct {
	n   int64
	bad string
}

func mint(ctx context.Context, a mintCall) (mintReply, error) {
	script := mintScript
	if bugs.CounterWithoutFloor {
		script = incrScript
	}
	v, err := a.node.Eval(ctx, script, []string{a.key})
	if err != nil {
		return mintReply{}, err
	}
	switch v := v.(type) {
	case string:
		// The script's fence: a decimal string, exact above 2^53.
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			if bugs.FenceThroughDouble {
				n = int64(float64(n))
			}
			return mintReply{n: n}, nil
		}
	case int64:
		return mintReply{n: v}, nil
	case []any:
		if len(v) == 1 {
			if s, ok := v[0].(string); ok {
				return mintReply{bad: s}, nil
			}
		}
	}
	return mintReply{bad: fmt.Sprintf("unexpected reply %v (%T)", v, v)}, nil
}

// durable lists the settings under which a node keeps every mint it
// acknowledged: each write reaches the append-only file, fsynced, before the
// reply, also while the file is rewritten, and a full memory refuses writes
// rather than evicting counters.
var durable = [...]struct{ name, want string }{
	{"appendonly", "yes"},
	{"appendfsync", "always"},
	{"no-appendfsync-on-rewrite", "no"},
	{"maxmemory-policy", "noeviction"},
}

// CheckDurability reads the counter node's settings (CONFIG GET) and role
// (INFO replication). It returns nil only for a primary with appendonly yes,
// appendfsync always, no-appendfsync-on-rewrite no and maxmemory-policy
// noeviction; otherwise, or when they could not be read, an error wrapping
// [ErrNotDurable] that names on one line each wrong setting. Run it at
// startup. It is bounded like [RedisCounter.Mint].
func (c *RedisCounter) CheckDurability(ctx context.Context) error {
	got, err := bounded.Call(ctx, c.timeout, readConfig, c.node)
	if err != nil {
		return fmt.Errorf("%w: its settings could not be read: %w", ErrNotDurable, err)
	}
	var wrong []string
	for _, s := range durable {
		if v := got[s.name]; !strings.EqualFold(v, s.want) {
			wrong = append(wrong, fmt.Sprintf("%s is %q, want %q", s.name, v, s.want))
		}
	}
	if role := got["role"]; role != "master" {
		wrong = append(wrong, fmt.Sprintf("role is %q, want \"master\" (a replica's counter can be behind its primary's)", role))
	}
	if len(wrong) > 0 {
		return fmt.Errorf("%w: %s", ErrNotDurable, strings.Join(wrong, ", "))
	}
	return nil
}

func readConfig(ctx context.Context, conn driver.Conn) (map[string]string, error) {
	node, ok := conn.(driver.Inspector)
	if !ok {
		return nil, errors.New("the node's driver cannot read CONFIG or INFO")
	}
	got := make(map[string]string, len(durable)+1)
	for _, s := range durable {
		m, err := node.ConfigGet(ctx, s.name)
		if err != nil {
			return nil, fmt.Errorf("CONFIG GET %s: %w", s.name, err)
		}
		v, ok := m[s.name]
		if !ok {
			return nil, fmt.Errorf("CONFIG GET %s: no such setting", s.name)
		}
		got[s.name] = v
	}
	info, err := node.Info(ctx, "replication")
	if err != nil {
		return nil, fmt.Errorf("INFO replication: %w", err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "role:"); ok {
			got["role"] = v
			return got, nil
		}
	}
	return nil, errors.New("INFO replication: no role")
}

// Seed raises the counter of resource to at least atLeast, never lowers it,
// and gives a missing key at least the floor a mint would, atomically (one
// script). It is for a counter that continues another one (a migration), and
// the repair after [ErrCounterRegressed]: atLeast must then exceed every fence
// any process may have minted, with a margin (docs/fencing.md). It lifts this
// counter's refusal of resource. It is bounded like [RedisCounter.Mint].
func (c *RedisCounter) Seed(ctx context.Context, resource string, atLeast uint64) error {
	if err := names.Resource(resource); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	if atLeast > math.MaxInt64 {
		return fmt.Errorf("%w: seed %d is above what INCR can count to", ErrInvalidArgument, atLeast)
	}
	key := Key(resource)
	m := c.mark(resource)
	floor := max(atLeast, m.minted.Load())
	if _, err := bounded.Call(ctx, c.timeout, seed, seedCall{c.node, key, floor}); err != nil {
		return fmt.Errorf("fence: seed %s to %d: %w", key, floor, err)
	}
	m.regressed.Store(false)
	return nil
}

type seedCall struct {
	node  driver.Conn
	key   string
	floor uint64
}

func seed(ctx context.Context, a seedCall) (any, error) {
	return a.node.Eval(ctx, seedScript, []string{a.key}, a.floor)
}

// readScript reads a counter: its decimal value, or false when it is missing.
var readScript = driver.NewScript("return redis.call('GET', KEYS[1])")

// Last reads the counter of resource without changing it: the last fence
// minted for it (or the value a Seed raised it to), and false when the node
// has no counter for it (none minted yet, or the key was lost: the next
// mint starts from the node's clock). For an operator's inspection
// (redlock's Client.Inspect); it is bounded like [RedisCounter.Mint].
func (c *RedisCounter) Last(ctx context.Context, resource string) (uint64, bool, error) {
	if err := names.Resource(resource); err != nil {
		return 0, false, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	key := Key(resource)
	v, err := bounded.Call(ctx, c.timeout, read, mintCall{c.node, key})
	if err != nil {
		return 0, false, fmt.Errorf("fence: read %s: %w", key, err)
	}
	switch v := v.(type) {
	case nil:
		return 0, false, nil
	case string:
		if n, err := strconv.ParseUint(v, 10, 64); err == nil {
			return n, true, nil
		}
	}
	return 0, false, fmt.Errorf("%w: %s holds %v, not a counter", ErrCounter, key, v)
}

func read(ctx context.Context, a mintCall) (any, error) {
	v, err := a.node.Eval(ctx, readScript, []string{a.key})
	if errors.Is(err, driver.Nil) {
		return nil, nil
	}
	return v, err
}
