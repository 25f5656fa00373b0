package choose

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"quorumlock.dev/cmd/redlock-bench/internal/embeddedredis"
	"quorumlock.dev/cmd/redlock-bench/internal/lockload"
	"quorumlock.dev/cmd/redlock-bench/internal/sentinel"
	"quorumlock.dev/fence"
	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/redlock"

	"quorumlock.dev/driver"

	"quorumlock.dev/driver/goredis"
)

// redisNode is one Redis server of a run, in this process or a child process.
type redisNode struct {
	addr string
	kill func() // SIGKILL, or closing the in-process server
	stop func()
}

func startRedis(ctx context.Context, backend string) (*redisNode, error) {
	if backend == "embedded" {
		s, err := embeddedredis.Start()
		if err != nil {
			return nil, fmt.Errorf("miniredis: %w", err)
		}
		return &redisNode{addr: s.Addr(), kill: s.Close, stop: s.Close}, nil
	}
	s, err := redisserver.Start(ctx, redisserver.Options{})
	if errors.Is(err, redisserver.ErrNotInstalled) {
		return nil, fmt.Errorf("%w: redis-server (Debian package redis-server)", ErrNotInstalled)
	}
	if err != nil {
		return nil, err
	}
	return &redisNode{addr: s.Addr(), kill: func() { _ = s.Kill() }, stop: func() { _ = s.Stop() }}, nil
}

// redisOption is single-redis (one master, no fence) or redlock (five masters, a fence from
// a counter on a sixth server, writes guarded by fence.RedisGuard on a seventh).
type redisOption struct {
	masters []*redisNode
	counter *redisNode // nil for single-redis
	store   *redisNode // the storage the experiments write to
	// guarded: the experiments write through fence.RedisGuard with the lock's fence, not
	// with a plain SET.
	guarded bool
	clients []*redis.Client
	lock    *redlock.Client
	closers []func()
}

func openRedis(ctx context.Context, cfg Config, masters int) (_ *redisOption, err error) {
	o := &redisOption{}
	defer func() {
		if err != nil {
			o.close()
		}
	}()
	node := func() (*redisNode, error) {
		n, err := startRedis(ctx, cfg.Backend)
		if err == nil {
			o.closers = append(o.closers, n.stop)
		}
		return n, err
	}
	var ms []driver.Conn
	for range masters {
		n, err := node()
		if err != nil {
			return nil, err
		}
		o.masters = append(o.masters, n)
		ms = append(ms, goredis.Conn(o.client(n.addr)))
	}
	if o.store, err = node(); err != nil {
		return nil, err
	}
	opts := []redlock.Option{redlock.WithNodeTimeout(cfg.NodeTimeout)}
	if masters > 1 {
		o.guarded = true
		if o.counter, err = node(); err != nil {
			return nil, err
		}
		counter, err := fence.NewRedisCounter(goredis.Conn(o.client(o.counter.addr)))
		if err != nil {
			return nil, err
		}
		opts = append(opts, redlock.WithFence(counter))
	}
	if o.lock, err = redlock.New(ms, opts...); err != nil {
		return nil, err
	}
	return o, nil
}

func (o *redisOption) client(addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	o.clients = append(o.clients, c)
	return c
}

func (o *redisOption) close() {
	for _, c := range o.clients {
		_ = c.Close()
	}
	for _, stop := range o.closers {
		stop()
	}
}

func (o *redisOption) fence() string {
	if o.counter == nil {
		return "none"
	}
	return "INCR on a separate Redis counter (fence.RedisCounter)"
}

// The redlock.Client is shared: it is safe for concurrent use, as users share it.
func (o *redisOption) locker(context.Context, time.Duration) (lockload.Locker, error) {
	return redlockLocker{o.lock}, nil
}

type redlockLocker struct{ c *redlock.Client }

func (redlockLocker) Close() {}

func (l redlockLocker) Acquire(ctx context.Context, key string, ttl time.Duration) (func(context.Context) error, bool, error) {
	lk, err := l.c.TryLock(ctx, key, ttl)
	if errors.Is(err, redlock.ErrNotAcquired) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return lk.Unlock, true, nil
}

// stale: without a fence the late write is a plain SET, which nothing stops; with one it goes
// through fence.RedisGuard with the lock's fence.
func (o *redisOption) stale(ctx context.Context, cfg Config) (bool, string, error) {
	resource := uniqueName("choose:stale:")
	store := o.client(o.store.addr)
	// Lock, not TryLock: on a loaded machine an attempt can miss the node timeout.
	take := func(ctx context.Context, ttl time.Duration) (holder, error) {
		l, err := o.lock.Lock(ctx, resource, ttl)
		if err != nil {
			return holder{}, err
		}
		f, _ := l.Fence()
		return holder{fence: f, release: l.Unlock}, nil
	}
	sc := staleCase{
		first:  func(ctx context.Context) (holder, error) { return take(ctx, cfg.Lease) },
		pause:  func(ctx context.Context) error { return sleepCtx(ctx, 2*cfg.Lease) },
		second: func(ctx context.Context) (holder, error) { return take(ctx, cfg.TTL) },
	}
	key := "data:" + resource
	if !o.guarded {
		sc.write = func(ctx context.Context, _ holder, v string) error { return store.Set(ctx, key, v, 0).Err() }
		sc.read = func(ctx context.Context) (string, error) { return store.Get(ctx, key).Result() }
	} else {
		var g fence.RedisGuard
		sc.write = func(ctx context.Context, h holder, v string) error {
			return g.Set(ctx, goredis.Conn(store), key, v, h.fence, 0)
		}
		sc.read = func(ctx context.Context) (string, error) {
			v, _, err := g.Get(ctx, goredis.Conn(store), key)
			return v, err
		}
	}
	return runStale(ctx, sc)
}

func (o *redisOption) failover(ctx context.Context, cfg Config) (string, error) {
	if len(o.masters) == 1 {
		return replicaFailover(ctx, cfg)
	}
	resource := uniqueName("choose:failover:")
	lctx, cancel := context.WithTimeout(ctx, staleBound)
	defer cancel()
	a, err := o.lock.Lock(lctx, resource, cfg.TTL)
	if err != nil {
		return "", fmt.Errorf("first holder: %w", err)
	}
	defer func() { _ = a.Unlock(context.WithoutCancel(ctx)) }()
	o.masters[0].kill()
	b, err := tryUntilAnswered(lctx, o.lock, resource, cfg.TTL)
	switch {
	case err == nil:
		_ = b.Unlock(ctx)
		return fmt.Sprintf("lost: 1 of %d masters killed while held, a second holder acquired", len(o.masters)), nil
	case errors.Is(err, redlock.ErrNotAcquired):
		return fmt.Sprintf("kept: 1 of %d masters killed while held, a second client refused", len(o.masters)), nil
	default:
		return "", fmt.Errorf("second client: %w", err)
	}
}

// replicaFailover is single Redis's failover: a primary with a replica under Sentinel
// (always real redis-server processes), replication held back so that the lock's key is on
// the primary alone when it is killed, as in the window after an acknowledged write.
func replicaFailover(ctx context.Context, cfg Config) (string, error) {
	g, err := sentinel.Start(ctx, sentinel.Options{})
	if errors.Is(err, redisserver.ErrNotInstalled) {
		if cfg.Require {
			return "", fmt.Errorf("%w: redis-server, for Sentinel", ErrNotInstalled)
		}
		return "not run: needs redis-server (Sentinel)", nil
	}
	if err != nil {
		return "", err
	}
	defer func() { _ = g.Stop() }()
	primary, err := g.PrimaryAddr(ctx)
	if err != nil {
		return "", err
	}
	resource := uniqueName("choose:failover:")
	lockOn := func(addr string) (*redlock.Client, func(), error) {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		l, err := redlock.New([]driver.Conn{goredis.Conn(c)}, redlock.WithNodeTimeout(cfg.NodeTimeout))
		if err != nil {
			_ = c.Close()
			return nil, nil, err
		}
		return l, func() { _ = c.Close() }, nil
	}
	before, closeBefore, err := lockOn(primary)
	if err != nil {
		return "", err
	}
	defer closeBefore()
	if err := g.PauseReplication(ctx); err != nil {
		return "", err
	}
	if _, err := before.Lock(ctx, resource, cfg.TTL); err != nil {
		return "", fmt.Errorf("first holder: %w", err)
	}
	if err := g.KillPrimary(ctx); err != nil {
		return "", err
	}
	promoted, err := g.WaitFailover(ctx)
	if err != nil {
		return "", err
	}
	// What a Sentinel-aware client does once it learns of the promotion.
	after, closeAfter, err := lockOn(promoted)
	if err != nil {
		return "", err
	}
	defer closeAfter()
	b, err := tryUntilAnswered(ctx, after, resource, cfg.TTL)
	switch {
	case err == nil:
		_ = b.Unlock(ctx)
		return "lost: primary killed before the key replicated, the promoted replica granted a second holder", nil
	case errors.Is(err, redlock.ErrNotAcquired):
		return "kept: the promoted replica had the key", nil
	default:
		return "", fmt.Errorf("second holder: %w", err)
	}
}

// tryUntilAnswered is TryLock again while the masters fail to answer in time (a loaded
// machine), until it wins or is refused, or ctx ends.
func tryUntilAnswered(ctx context.Context, c *redlock.Client, resource string, ttl time.Duration) (*redlock.Lock, error) {
	for {
		l, err := c.TryLock(ctx, resource, ttl)
		if !errors.Is(err, redlock.ErrQuorumUnavailable) || ctx.Err() != nil {
			return l, err
		}
		_ = sleepCtx(ctx, 20*time.Millisecond)
	}
}
