package redlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/clockdrift"
	"quorumlock.dev/driver"
	"quorumlock.dev/fence"

	"quorumlock.dev/driver/goredis"
	"quorumlock.dev/internal/harness/memredis"
	"quorumlock.dev/redlock/internal/plain"
)

// TestQuorumMatrix: every split of 1, 3, 5 and 7 masters into held by
// another client, down and free, in virtual time: TryLock wins exactly
// when the free masters make a majority, says why when it loses, and
// leaves no key of its own and another holder's keys untouched.
func TestQuorumMatrix(t *testing.T) {
	for _, n := range []int{1, 3, 5, 7} {
		need := n/2 + 1
		for held := 0; held <= n; held++ {
			for down := 0; held+down <= n; down++ {
				t.Run(fmt.Sprintf("masters=%d/held=%d/down=%d", n, held, down), func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) {
						servers, masters := memMasters(n)
						c := virtualClient(t, masters, WithNodeTimeout(100*time.Millisecond))
						require.Equal(t, need, c.quorum)
						const res = "job"
						for _, s := range servers[:held] {
							s.Set("lock:"+res, "someone-else", time.Minute)
						}
						for _, s := range servers[held : held+down] {
							s.Fail(memredis.ErrDown)
						}
						holders := func(token string) int {
							synctest.Wait() // the calls a round did not wait for land
							n := 0
							for _, s := range servers {
								if v, ok := s.Get("lock:" + res); ok && v == token {
									n++
								}
							}
							return n
						}

						l, err := c.TryLock(context.Background(), res, time.Minute)
						free := n - held - down
						if free >= need {
							require.NoError(t, err)
							assert.Equal(t, free, holders(l.Token()))
							require.NoError(t, l.Unlock(context.Background()))
							assert.Zero(t, holders(l.Token()))
							return
						}
						require.Error(t, err)
						assert.Nil(t, l)
						switch {
						case down > n-need && held > 0:
							// Both contention and failures rule the majority out; the
							// error names what the first answers proved, and always
							// carries the failed masters.
							assert.True(t, errors.Is(err, ErrQuorumUnavailable) || errors.Is(err, ErrNotAcquired), err)
							var me *MasterError
							assert.ErrorAs(t, err, &me)
						case down > n-need:
							assert.ErrorIs(t, err, ErrQuorumUnavailable)
							var me *MasterError
							require.ErrorAs(t, err, &me)
							assert.Equal(t, "acquire", me.Op)
							assert.Contains(t, me.Addr, "mem-")
						default:
							assert.ErrorIs(t, err, ErrNotAcquired)
							assert.NotErrorIs(t, err, ErrQuorumUnavailable)
						}
						synctest.Wait()
						for i, s := range servers[held+down:] {
							_, ok := s.Get("lock:" + res)
							assert.False(t, ok, "free master %d keeps a key after a lost attempt", held+down+i)
						}
						for _, s := range servers[:held] {
							v, _ := s.Get("lock:" + res)
							assert.Equal(t, "someone-else", v, "a lost attempt touched another holder's key")
						}
					})
				})
			}
		}
	}
}

func TestSingleInstanceMode(t *testing.T) {
	servers, masters := miniMasters(t, 1)
	c := newTestClient(t, masters)
	res := "invoice:42"
	l, err := c.TryLock(context.Background(), res, 30*time.Second)
	require.NoError(t, err)
	settle(t, servers, res, l)
	ttl := servers[0].TTL("lock:" + res)
	assert.Equal(t, 30*time.Second, ttl, "SET must carry the TTL as PX")
	_, err = c.TryLock(context.Background(), res, 30*time.Second)
	assert.ErrorIs(t, err, ErrNotAcquired)
	require.NoError(t, l.Unlock(context.Background()))
}

func TestTokenAndKeys(t *testing.T) {
	servers, masters := miniMasters(t, 3)
	c := newTestClient(t, masters)
	a, err := c.TryLock(context.Background(), "alloc:WH-01", time.Minute)
	require.NoError(t, err)
	assert.Len(t, a.Token(), 32)
	assert.Equal(t, "alloc:WH-01", a.Resource())
	settle(t, servers, "alloc:WH-01", a)
	v, err := servers[0].Get("lock:alloc:WH-01")
	require.NoError(t, err)
	assert.Equal(t, a.Token(), v)
	require.NoError(t, a.Unlock(context.Background()))
	b, err := c.TryLock(context.Background(), "alloc:WH-01", time.Minute)
	require.NoError(t, err)
	assert.NotEqual(t, a.Token(), b.Token(), "tokens must not repeat")
	require.NoError(t, b.Unlock(context.Background()))
}

// TestUntilFollowsValidity: Until is start + ttl − drift term, so what is
// left after the attempt is the validity of the algorithm.
func TestUntilFollowsValidity(t *testing.T) {
	_, masters := miniMasters(t, 5)
	c := newTestClient(t, masters, WithDrift(0.1, 5*time.Millisecond))
	ttl := 10 * time.Second
	before := time.Now()
	l, err := c.TryLock(context.Background(), resourceName(t), ttl)
	after := time.Now()
	require.NoError(t, err)
	allowance := clockdrift.Allowance(ttl, 0.1, 5*time.Millisecond)
	require.Equal(t, 1005*time.Millisecond, allowance)
	assert.False(t, l.Until().Before(before.Add(ttl-allowance)))
	assert.False(t, l.Until().After(after.Add(ttl-allowance)))
	require.NoError(t, l.Unlock(context.Background()))
}

func TestNewRejectsBadInput(t *testing.T) {
	_, masters := miniMasters(t, 2)
	var typedNil *redis.Client
	sameAddr := newClient(t, raw(masters[0]).Options().Addr)
	counterOnMaster, err := fence.NewRedisCounter(masters[1])
	require.NoError(t, err)
	counterOnSameAddr, err := fence.NewRedisCounter(goredis.Conn(newClient(t, raw(masters[1]).Options().Addr)))
	require.NoError(t, err)
	tests := []struct {
		name    string
		masters []Master
		opts    []Option
	}{
		{"no masters", nil, nil},
		{"empty masters", []Master{}, nil},
		{"nil master", conns(masters[0], nil), nil},
		{"typed nil master", conns(typedNil), nil},
		{"same client twice", conns(masters[0], masters[1], masters[0]), nil},
		{"two clients of one server", conns(masters[0], sameAddr), nil},
		{"zero node timeout", masters, []Option{WithNodeTimeout(0)}},
		{"negative node timeout", masters, []Option{WithNodeTimeout(-time.Second)}},
		{"negative drift factor", masters, []Option{WithDrift(-0.01, 0)}},
		{"drift factor 0.5", masters, []Option{WithDrift(0.5, 0)}},
		{"drift factor NaN", masters, []Option{WithDrift(math.NaN(), 0)}},
		{"negative drift constant", masters, []Option{WithDrift(0.01, -time.Millisecond)}},
		{"negative retry attempts", masters, []Option{WithRetry(-1, 0, 0)}},
		{"negative retry delay", masters, []Option{WithRetry(3, -time.Millisecond, 0)}},
		{"negative retry jitter", masters, []Option{WithRetry(3, 0, -time.Millisecond)}},
		{"nil fence minter", masters, []Option{WithFence(nil)}},
		{"typed nil fence minter", masters, []Option{WithFence((*fence.RedisCounter)(nil))}},
		{"nil logger", masters, []Option{WithLogger(nil)}},
		{"fence counter on a master", masters, []Option{WithFence(counterOnMaster)}},
		{"fence counter on a master's address", masters, []Option{WithFence(counterOnSameAddr)}},
		{"nil option", masters, []Option{nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.masters, tt.opts...)
			assert.ErrorIs(t, err, ErrInvalidArgument)
			assert.Nil(t, c)
			assert.True(t, strings.HasPrefix(err.Error(), "redlock: "), err.Error())
		})
	}
}

// uncomparable is a Master of a type that == cannot compare; New must not
// panic on it.
type uncomparable struct {
	*redis.Client
	tags []string
}

func TestNewUncomparableMaster(t *testing.T) {
	_, masters := miniMasters(t, 2)
	a := uncomparable{raw(masters[0]), nil}
	b := uncomparable{raw(masters[1]), nil}
	c, err := New(conns(a, b))
	require.NoError(t, err)
	assert.Equal(t, 2, len(c.masters))
}

func TestLockRejectsBadInput(t *testing.T) {
	_, masters := miniMasters(t, 3)
	c := newTestClient(t, masters, WithNodeTimeout(100*time.Millisecond))
	tests := []struct {
		name     string
		resource string
		ttl      time.Duration
	}{
		{"zero ttl", "a:1", 0},
		{"negative ttl", "a:1", -time.Second},
		{"sub-millisecond ttl", "a:1", time.Microsecond},
		{"ttl equal to node timeout", "a:1", 100 * time.Millisecond},
		{"ttl below node timeout", "a:1", 99 * time.Millisecond},
		{"empty resource", "", time.Second},
		{"newline", "a:1\nDEL x", time.Second},
		{"NUL", "a:\x001", time.Second},
		{"DEL character", "a:\x7f", time.Second},
		{"invalid UTF-8", "a:\xff", time.Second},
		{"too long", strings.Repeat("x", maxResourceLen+1), time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for name, lock := range map[string]func(context.Context, string, time.Duration) (*Lock, error){
				"TryLock": c.TryLock, "Lock": c.Lock,
			} {
				l, err := lock(context.Background(), tt.resource, tt.ttl)
				assert.ErrorIs(t, err, ErrInvalidArgument, name)
				assert.Nil(t, l, name)
			}
		})
	}
	l, err := c.TryLock(context.Background(), strings.Repeat("x", maxResourceLen), time.Second)
	require.NoError(t, err, "a resource of exactly maxResourceLen bytes is valid")
	assert.ErrorIs(t, l.Extend(context.Background(), 0), ErrInvalidArgument)
	require.NoError(t, l.Unlock(context.Background()))
}

// TestWrongTypeKey: a lock key that holds a hash is a per-master error,
// never a grant and never a panic.
func TestWrongTypeKey(t *testing.T) {
	servers, masters := miniMasters(t, 3)
	c := newTestClient(t, masters)
	res := resourceName(t)
	servers[0].HSet("lock:"+res, "field", "value")

	l, err := c.TryLock(context.Background(), res, time.Minute)
	require.NoError(t, err, "two healthy masters of three are a majority")
	require.NoError(t, l.Unlock(context.Background()))

	for _, s := range servers[1:] {
		s.HSet("lock:"+res, "field", "value")
	}
	l, err = c.TryLock(context.Background(), res, time.Minute)
	require.Error(t, err)
	assert.Nil(t, l)
	assert.ErrorIs(t, err, ErrWrongType)
	assert.NotErrorIs(t, err, ErrNotAcquired)
	var addrs []string
	for _, me := range masterErrors(err) {
		assert.Contains(t, me.Err.Error(), "WRONGTYPE")
		assert.Equal(t, "acquire", me.Op)
		addrs = append(addrs, me.Addr)
	}
	assert.ElementsMatch(t, []string{servers[0].Addr(), servers[1].Addr(), servers[2].Addr()}, addrs)
	for _, s := range servers {
		assert.Equal(t, "hash", s.Type("lock:"+res), "the foreign key must be left alone")
	}

	// Lock does not wait for such a key to go away: it never expires by itself.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err = c.Lock(ctx, res, time.Minute)
	assert.Nil(t, l)
	assert.ErrorIs(t, err, ErrWrongType)
	assert.NoError(t, ctx.Err(), "Lock waited for a key of another type until its context ended")
	l, err = c.LockAll(ctx, []string{res, resourceName(t)}, time.Minute)
	assert.Nil(t, l)
	assert.ErrorIs(t, err, ErrWrongType)
	assert.NoError(t, ctx.Err(), "LockAll waited for a key of another type until its context ended")

	// One master of three with such a key, the others held: contention,
	// which Lock waits out.
	res2 := resourceName(t)
	servers[0].HSet("lock:"+res2, "field", "value")
	for _, s := range servers[1:] {
		require.NoError(t, s.Set("lock:"+res2, "another-holder"))
	}
	_, err = c.TryLock(context.Background(), res2, time.Minute)
	assert.ErrorIs(t, err, ErrNotAcquired)
	assert.NotErrorIs(t, err, ErrWrongType)
}

func TestFence(t *testing.T) {
	ctx := context.Background()
	t.Run("none without WithFence", func(t *testing.T) {
		_, masters := miniMasters(t, 3)
		l, err := newTestClient(t, masters).TryLock(ctx, resourceName(t), time.Minute)
		require.NoError(t, err)
		v, ok := l.Fence()
		assert.False(t, ok)
		assert.Zero(t, v)
		require.NoError(t, l.Unlock(ctx))
	})
	t.Run("strictly increasing from a Redis counter", func(t *testing.T) {
		_, masters := miniMasters(t, 3)
		counterSrv := miniredis.RunT(t)
		counter, err := fence.NewRedisCounter(goredis.Conn(newClient(t, counterSrv.Addr())))
		require.NoError(t, err)
		c := newTestClient(t, masters, WithFence(counter))
		res := resourceName(t)
		var last uint64
		for range 5 {
			l, err := c.TryLock(ctx, res, time.Minute)
			require.NoError(t, err)
			v, ok := l.Fence()
			require.True(t, ok)
			assert.Greater(t, v, last)
			last = v
			require.NoError(t, l.Unlock(ctx))
		}
		got, err := counterSrv.Get("fence:" + res)
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprint(last), got)
	})
	t.Run("minted only after the quorum", func(t *testing.T) {
		servers, masters := miniMasters(t, 5)
		res := resourceName(t)
		m := &countingMinter{}
		var heldAtMint atomic.Int64
		m.check = func() {
			n := 0
			for _, s := range servers {
				if s.Exists("lock:" + res) {
					n++
				}
			}
			heldAtMint.Store(int64(n))
		}
		c := newTestClient(t, masters, WithFence(m))
		l, err := c.TryLock(ctx, res, time.Minute)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, heldAtMint.Load(), int64(3))
		_, err = c.TryLock(ctx, res, time.Minute)
		assert.ErrorIs(t, err, ErrNotAcquired)
		assert.Equal(t, int64(1), m.calls.Load(), "a lost attempt must not mint")
		require.NoError(t, l.Unlock(ctx))
	})
	t.Run("mint fails: released, never handed out", func(t *testing.T) {
		servers, masters := miniMasters(t, 3)
		res := resourceName(t)
		boom := errors.New("counter node down")
		c := newTestClient(t, masters, WithFence(&countingMinter{err: boom}))
		l, err := c.TryLock(ctx, res, time.Minute)
		assert.Nil(t, l)
		assert.ErrorIs(t, err, ErrFenceUnavailable)
		assert.ErrorIs(t, err, boom)
		for _, s := range servers {
			assert.False(t, s.Exists("lock:"+res), "the lock must be released when the fence fails")
		}
	})
	t.Run("counter node down", func(t *testing.T) {
		servers, masters := miniMasters(t, 3)
		counterSrv := miniredis.RunT(t)
		counter, err := fence.NewRedisCounter(goredis.Conn(newClient(t, counterSrv.Addr())))
		require.NoError(t, err)
		counterSrv.Close()
		res := resourceName(t)
		l, err := newTestClient(t, masters, WithFence(counter)).TryLock(ctx, res, time.Minute)
		assert.Nil(t, l)
		assert.ErrorIs(t, err, ErrFenceUnavailable)
		for _, s := range servers {
			assert.False(t, s.Exists("lock:"+res))
		}
	})
	t.Run("mint outlasts the lease", func(t *testing.T) {
		servers, masters := miniMasters(t, 3)
		res := resourceName(t)
		m := &countingMinter{delay: time.Second}
		c := newTestClient(t, masters, WithFence(m), WithNodeTimeout(50*time.Millisecond))
		start := time.Now()
		l, err := c.TryLock(ctx, res, 100*time.Millisecond)
		assert.Nil(t, l)
		assert.ErrorIs(t, err, ErrFenceUnavailable)
		assert.Less(t, time.Since(start), 900*time.Millisecond, "the mint must be bounded by the lease")
		for _, s := range servers {
			assert.False(t, s.Exists("lock:"+res))
		}
	})
	t.Run("validity recomputed after the mint", func(t *testing.T) {
		_, masters := miniMasters(t, 3)
		m := &countingMinter{delay: 100 * time.Millisecond}
		c := newTestClient(t, masters, WithFence(m))
		ttl := time.Second
		l, err := c.TryLock(ctx, resourceName(t), ttl)
		require.NoError(t, err)
		left := time.Until(l.Until())
		assert.Less(t, left, ttl-100*time.Millisecond, "the mint's time is not given back")
		require.NoError(t, l.Unlock(ctx))
	})
}

func TestLockRetries(t *testing.T) {
	ctx := context.Background()
	t.Run("wins once the holder lets go", func(t *testing.T) {
		_, masters := miniMasters(t, 3)
		c := newTestClient(t, masters, WithRetry(0, 10*time.Millisecond, 10*time.Millisecond))
		res := resourceName(t)
		first, err := c.TryLock(ctx, res, time.Minute)
		require.NoError(t, err)
		go func() {
			time.Sleep(100 * time.Millisecond)
			_ = first.Unlock(ctx)
		}()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		second, err := c.Lock(cctx, res, time.Minute)
		require.NoError(t, err)
		require.NoError(t, second.Unlock(ctx))
	})
	t.Run("stops after the budget", func(t *testing.T) {
		servers, masters := miniMasters(t, 3)
		res := resourceName(t)
		for _, s := range servers {
			require.NoError(t, s.Set("lock:"+res, "someone-else"))
		}
		var attempts atomic.Int64
		counted := make([]Master, len(masters))
		for i, m := range masters {
			counted[i] = countingMaster{m.(full), &attempts}
		}
		c := newTestClient(t, counted, WithRetry(4, time.Millisecond, time.Millisecond))
		l, err := c.Lock(ctx, res, time.Minute)
		assert.Nil(t, l)
		assert.ErrorIs(t, err, ErrNotAcquired)
		// The first on every master; the next three, waiting on the
		// holder, each refused by the probe master alone (probeMaster).
		assert.Equal(t, int64(3+3*1), attempts.Load(), "4 attempts on 3 masters")
	})
	t.Run("stops when the context ends", func(t *testing.T) {
		servers, masters := miniMasters(t, 3)
		res := resourceName(t)
		for _, s := range servers {
			require.NoError(t, s.Set("lock:"+res, "someone-else"))
		}
		c := newTestClient(t, masters, WithRetry(0, 10*time.Millisecond, 0))
		cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		l, err := c.Lock(cctx, res, time.Minute)
		assert.Nil(t, l)
		assert.ErrorIs(t, err, ErrNotAcquired)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
	})
	t.Run("a last attempt cut short by the context reports the one before", func(t *testing.T) {
		// The deadline falls while the masters are still to answer the
		// second attempt: what the first found (others hold the lock) is
		// the answer, not "quorum unavailable". Twin: when the first
		// attempt is the one cut short, its masters did not answer in the
		// time the caller gave, and the error says so.
		for _, tc := range []struct {
			name  string
			after int64 // attempts that complete before the masters stall
			want  error
		}{{"second attempt", 1, ErrNotAcquired}, {"first attempt", 0, ErrQuorumUnavailable}} {
			for _, all := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s all=%v", tc.name, all), func(t *testing.T) {
					servers, masters := miniMasters(t, 3)
					res := resourceName(t)
					for _, s := range servers {
						require.NoError(t, s.Set("lock:"+res, "someone-else"))
					}
					obs := &countingObserver{}
					for _, m := range masters {
						raw(m).AddHook(stallAcquires{func() bool { return obs.attempts.Load() >= tc.after }})
					}
					// The round's own deadline is far: only the caller's ends it.
					c := newTestClient(t, masters, WithHooks(hooksOf(obs)), WithNodeTimeout(10*time.Second), WithRetry(0, 10*time.Millisecond, 0))
					cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
					defer cancel()
					var err error
					if all {
						_, err = c.LockAll(cctx, []string{res}, time.Minute)
					} else {
						_, err = c.Lock(cctx, res, time.Minute)
					}
					assert.ErrorIs(t, err, tc.want)
					assert.ErrorIs(t, err, context.DeadlineExceeded)
					if tc.want == ErrNotAcquired {
						assert.NotErrorIs(t, err, ErrQuorumUnavailable)
					}
					assert.Equal(t, tc.after+1, obs.attempts.Load(), "attempts")
				})
			}
		}
	})
	t.Run("cancelled before the first attempt", func(t *testing.T) {
		// Nothing was tried: not "others hold the lock", and the observer
		// hears of it.
		_, masters := miniMasters(t, 3)
		obs := newLockLog()
		c := newTestClient(t, masters, WithHooks(hooksOf(obs)))
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		lockAll := func(ctx context.Context, res string, ttl time.Duration) (*Lock, error) {
			return c.LockAll(ctx, []string{res, res + ":2"}, ttl)
		}
		for _, lock := range []func(context.Context, string, time.Duration) (*Lock, error){c.Lock, c.TryLock, lockAll} {
			l, err := lock(cctx, resourceName(t), time.Minute)
			assert.Nil(t, l)
			assert.ErrorIs(t, err, context.Canceled)
			assert.NotErrorIs(t, err, ErrNotAcquired)
			assert.NotErrorIs(t, err, ErrQuorumUnavailable)
			assert.ErrorContains(t, err, "not attempted")
		}
		attempts, votes, _ := obs.take()
		assert.Len(t, attempts, 3, "attempts the observer heard of")
		for _, a := range attempts {
			assert.ErrorIs(t, a.err, context.Canceled)
		}
		assert.Empty(t, votes, "no master was called")
	})
}

// countingMaster counts the acquiring SETs sent to a master.
// stallAcquires is a go-redis hook that holds every acquiring command (the
// SET NX of Lock, the script of LockAll) until its context ends, once stall
// says so.
type stallAcquires struct{ stall func() bool }

func (stallAcquires) DialHook(next redis.DialHook) redis.DialHook { return next }
func (stallAcquires) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h stallAcquires) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		acquire := cmd.Name() == "set"
		for _, s := range []*driver.Script{acquireAllScript, plain.ProbeScript} {
			acquire = acquire || (cmd.Name() == "evalsha" && len(args) > 1 && args[1] == s.Hash()) ||
				(cmd.Name() == "eval" && len(args) > 1 && args[1] == s.Source())
		}
		if acquire && h.stall() {
			<-ctx.Done()
			cmd.SetErr(ctx.Err())
			return ctx.Err()
		}
		return next(ctx, cmd)
	}
}

type countingMaster struct {
	full
	sets *atomic.Int64
}

func (m countingMaster) SetNX(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	m.sets.Add(1)
	return m.full.SetNX(ctx, key, value, ttl)
}

// Eval counts the probe script, whose SET NX is an attempt's first (see
// probeCall).
func (m countingMaster) Eval(ctx context.Context, script *driver.Script, keys []string, args ...any) (any, error) {
	if script == plain.ProbeScript {
		m.sets.Add(1)
	}
	return m.full.Eval(ctx, script, keys, args...)
}

// TestMutualExclusion: many goroutines share one client and fight for one
// resource; never are two inside the critical section at once.
func TestMutualExclusion(t *testing.T) {
	_, masters := miniMasters(t, 5)
	// A generous node timeout: 16 goroutines on five in-process servers under
	// the race detector are slow, and a timed-out Unlock is not what this tests.
	c := newTestClient(t, masters, WithRetry(0, time.Millisecond, 2*time.Millisecond), WithNodeTimeout(time.Second))
	res := resourceName(t)
	var inside, entries atomic.Int64
	var wg sync.WaitGroup
	// A safety net only: on a loaded machine 160 contended entries under -race
	// take 10-20 s.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				l, err := c.Lock(ctx, res, time.Minute)
				if !assert.NoError(t, err) {
					return
				}
				if n := inside.Add(1); n != 1 {
					t.Errorf("%d holders at once", n)
				}
				entries.Add(1)
				time.Sleep(100 * time.Microsecond)
				inside.Add(-1)
				assert.NoError(t, l.Unlock(ctx))
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int64(160), entries.Load())
}

func TestLogger(t *testing.T) {
	servers, masters := miniMasters(t, 3)
	var buf syncBuffer
	c := newTestClient(t, masters, WithLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))), WithRetry(2, time.Millisecond, 0))
	res := resourceName(t)
	for _, s := range servers {
		require.NoError(t, s.Set("lock:"+res, "x"))
	}
	_, err := c.Lock(context.Background(), res, time.Minute)
	require.ErrorIs(t, err, ErrNotAcquired)
	assert.Contains(t, buf.String(), "redlock: retrying")
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
