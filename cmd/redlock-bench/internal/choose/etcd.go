package choose

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"quorumlock.dev/cmd/redlock-bench/internal/etcdcluster"
	"quorumlock.dev/cmd/redlock-bench/internal/lockload"
	"quorumlock.dev/fence"

	"quorumlock.dev/driver/goredis"
)

// etcdOption is etcd's own lock, concurrency.Mutex, on a three-member cluster: one session
// (a kept-alive lease) per goroutine, and the revision of the Mutex's key as fence.
type etcdOption struct {
	cluster *etcdcluster.Cluster
	cli     *clientv3.Client
	store   *redisNode // the experiments' storage, guarded by fence.RedisGuard
	storec  *redis.Client

	mu       sync.Mutex
	sessions []*concurrency.Session
}

func openEtcd(ctx context.Context, cfg Config) (_ *etcdOption, err error) {
	o := &etcdOption{}
	defer func() {
		if err != nil {
			o.close()
		}
	}()
	o.cluster, err = etcdcluster.Start(ctx)
	if errors.Is(err, etcdcluster.ErrNotInstalled) {
		return nil, fmt.Errorf("%w: etcd (Debian package etcd-server)", ErrNotInstalled)
	}
	if err != nil {
		return nil, err
	}
	if o.cli, err = o.cluster.Client(); err != nil {
		return nil, err
	}
	if o.store, err = startRedis(ctx, cfg.Backend); err != nil {
		return nil, err
	}
	o.storec = redis.NewClient(&redis.Options{Addr: o.store.addr, MaxRetries: -1})
	return o, nil
}

func (o *etcdOption) close() {
	o.mu.Lock()
	for _, s := range o.sessions {
		_ = s.Close()
	}
	o.mu.Unlock()
	if o.cli != nil {
		_ = o.cli.Close()
	}
	if o.storec != nil {
		_ = o.storec.Close()
	}
	if o.store != nil {
		o.store.stop()
	}
	if o.cluster != nil {
		o.cluster.Stop()
	}
}

func (o *etcdOption) fence() string {
	return "etcd revision of the lock key (its create revision)"
}

// session returns a new session of the experiments whose lease lasts ttl, rounded up to
// whole seconds (what etcd's leases are counted in); the option closes it.
func (o *etcdOption) session(ctx context.Context, ttl time.Duration) (*concurrency.Session, error) {
	s, err := concurrency.NewSession(o.cli, concurrency.WithContext(ctx),
		concurrency.WithTTL(int(math.Ceil(ttl.Seconds()))))
	if err != nil {
		return nil, err
	}
	o.mu.Lock()
	o.sessions = append(o.sessions, s)
	o.mu.Unlock()
	return s, nil
}

// locker's session lease is ttl, the lock's lease in the other options, and lasts as long as
// the locker: the Mutex borrows it for each lock.
func (o *etcdOption) locker(ctx context.Context, ttl time.Duration) (lockload.Locker, error) {
	s, err := concurrency.NewSession(o.cli, concurrency.WithTTL(int(math.Ceil(ttl.Seconds()))))
	if err != nil {
		return nil, err
	}
	return etcdLocker{s}, nil
}

type etcdLocker struct{ s *concurrency.Session }

func (l etcdLocker) Close() { _ = l.s.Close() }

func (l etcdLocker) Acquire(ctx context.Context, key string, _ time.Duration) (func(context.Context) error, bool, error) {
	m := concurrency.NewMutex(l.s, "choose/lock/"+key)
	err := m.TryLock(ctx)
	if errors.Is(err, concurrency.ErrLocked) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return m.Unlock, true, nil
}

// createRevision is the fence of m, held: the revision that created its key, which orders
// the holders of a resource (the Mutex grants to the lowest).
func (o *etcdOption) createRevision(ctx context.Context, m *concurrency.Mutex) (uint64, error) {
	resp, err := o.cli.Get(ctx, m.Key())
	if err != nil {
		return 0, err
	}
	if len(resp.Kvs) == 0 {
		return 0, errors.New("the mutex's key is gone")
	}
	return uint64(resp.Kvs[0].CreateRevision), nil
}

// stale: the first session stops renewing its lease (Orphan, what a paused process does),
// the lease runs out and etcd deletes the key, the second session's Lock returns, and both
// write through fence.RedisGuard with their key's create revision as fence.
func (o *etcdOption) stale(ctx context.Context, cfg Config) (bool, string, error) {
	name := uniqueName("choose/stale/")
	key := "data:" + name
	var sa *concurrency.Session
	var g fence.RedisGuard
	take := func(ctx context.Context, s *concurrency.Session, wait bool) (holder, error) {
		m := concurrency.NewMutex(s, name)
		var err error
		if wait {
			err = m.Lock(ctx)
		} else {
			err = m.TryLock(ctx)
		}
		if err != nil {
			return holder{}, err
		}
		f, err := o.createRevision(ctx, m)
		return holder{fence: f, release: m.Unlock}, err
	}
	sc := staleCase{
		first: func(ctx context.Context) (holder, error) {
			var err error
			if sa, err = o.session(ctx, cfg.Lease); err != nil {
				return holder{}, err
			}
			return take(ctx, sa, false)
		},
		pause: func(context.Context) error { sa.Orphan(); return nil },
		second: func(ctx context.Context) (holder, error) {
			sb, err := o.session(ctx, cfg.TTL)
			if err != nil {
				return holder{}, err
			}
			return take(ctx, sb, true)
		},
		write: func(ctx context.Context, h holder, v string) error {
			return g.Set(ctx, goredis.Conn(o.storec), key, v, h.fence, 0)
		},
		read: func(ctx context.Context) (string, error) {
			v, _, err := g.Get(ctx, goredis.Conn(o.storec), key)
			return v, err
		},
	}
	return runStale(ctx, sc)
}

// etcdFailoverBound bounds the failover experiment: an election, and a session granted after it.
const etcdFailoverBound = 30 * time.Second

// failover kills the leader while a session holds the lock, then tries the lock from a
// second session until etcd answers (refused, or granted), and again after the release.
func (o *etcdOption) failover(ctx context.Context, cfg Config) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, etcdFailoverBound)
	defer cancel()
	name := uniqueName("choose/failover/")
	sa, err := o.session(ctx, cfg.TTL)
	if err != nil {
		return "", err
	}
	a := concurrency.NewMutex(sa, name)
	if err := a.TryLock(ctx); err != nil {
		return "", fmt.Errorf("first holder: %w", err)
	}
	leader, err := o.cluster.Leader(ctx, o.cli)
	if err != nil {
		return "", err
	}
	o.cluster.Kill(leader)
	try := func() (bool, error) {
		for {
			err := o.tryOnce(ctx, name, cfg.TTL)
			if err == nil {
				return true, nil
			}
			if errors.Is(err, concurrency.ErrLocked) {
				return false, nil
			}
			if ctx.Err() != nil {
				return false, fmt.Errorf("second session: %w", err)
			}
			_ = sleepCtx(ctx, 50*time.Millisecond)
		}
	}
	second, err := try()
	if err != nil {
		return "", err
	}
	if second {
		return fmt.Sprintf("lost: the leader (1 of %d members) killed while held, a second session acquired", etcdcluster.Members), nil
	}
	for {
		err := a.Unlock(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return "", fmt.Errorf("first holder's release: %w", err)
		}
		_ = sleepCtx(ctx, 50*time.Millisecond)
	}
	if after, err := try(); err != nil || !after {
		return "", fmt.Errorf("second session after the release: acquired %v, %v", after, err)
	}
	return fmt.Sprintf("kept: the leader (1 of %d members) killed while held, a second session refused, then granted after the release", etcdcluster.Members), nil
}

// tryOnce takes and releases the lock name from a fresh session, closed after.
func (o *etcdOption) tryOnce(ctx context.Context, name string, ttl time.Duration) error {
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := concurrency.NewSession(o.cli, concurrency.WithContext(actx), concurrency.WithTTL(int(math.Ceil(ttl.Seconds()))))
	if err != nil {
		return err
	}
	defer s.Close()
	m := concurrency.NewMutex(s, name)
	if err := m.TryLock(actx); err != nil {
		return err
	}
	return m.Unlock(actx)
}
