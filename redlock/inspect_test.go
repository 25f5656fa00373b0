package redlock

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alicebob/miniredis/v2"

	"quorumlock.dev/driver"
	"quorumlock.dev/driver/goredis"
	"quorumlock.dev/fence"
)

// TestInspect: what each master holds for a resource, read without
// changing anything: nobody, a holder on a majority with its TTL, a key of
// another type, a master that does not answer, fair waiters queued.
func TestInspect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		servers, masters := memMasters(5)
		ctx := context.Background()
		c := virtualClient(t, masters)

		in, err := c.Inspect(ctx, "job")
		require.NoError(t, err)
		assert.Equal(t, "job", in.Resource)
		assert.Empty(t, in.Holder)
		require.Len(t, in.Masters, 5)
		for i, k := range in.Masters {
			assert.Equal(t, MasterKey{Addr: c.addrs[i]}, k, "a free resource")
		}

		l, err := c.TryLock(ctx, "job", time.Minute)
		require.NoError(t, err)
		time.Sleep(10 * time.Second)
		in, err = c.Inspect(ctx, "job")
		require.NoError(t, err)
		assert.Equal(t, l.Token(), in.Holder)
		for _, k := range in.Masters {
			assert.Equal(t, l.Token(), k.Token)
			assert.Equal(t, 50*time.Second, k.TTL)
			assert.False(t, k.WrongType)
		}
		for _, s := range servers {
			assert.Equal(t, []string{"lock:job"}, s.Keys(), "Inspect wrote to a master")
		}

		_, err = masters[0].Eval(ctx, driver.NewScript("redis.call('HSET', KEYS[1], 'f', 'v') return 1"), []string{"lock:hash"})
		require.NoError(t, err)
		servers[4].Hang()
		in, err = c.Inspect(ctx, "hash")
		require.NoError(t, err, "one master of five hung is no outage")
		assert.True(t, in.Masters[0].WrongType)
		assert.Empty(t, in.Masters[0].Token)
		var me *MasterError
		require.ErrorAs(t, in.Masters[4].Err, &me)
		assert.Equal(t, c.addrs[4], me.Addr)
		servers[3].Hang()
		servers[2].Hang()
		_, err = c.Inspect(ctx, "job")
		assert.ErrorIs(t, err, ErrQuorumUnavailable)
		for _, s := range servers[2:] {
			s.Resume()
		}
		time.Sleep(time.Second)
		synctest.Wait()
		require.NoError(t, l.Unlock(ctx))
	})
}

// TestInspectFairQueue: a fair waiter queued on a held lock shows as the
// queue's head on the masters it queued on.
func TestInspectFairQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, masters := memMasters(3)
		ctx, cancel := context.WithCancel(context.Background())
		holder := virtualClient(t, masters, WithFairness(3*time.Second))
		waiter := virtualClient(t, masters, WithFairness(3*time.Second))
		l, err := holder.TryLock(ctx, "job", time.Minute)
		require.NoError(t, err)
		got := lockAsync(ctx, waiter, "job", time.Minute)
		time.Sleep(time.Second)
		synctest.Wait()
		in, err := holder.Inspect(ctx, "job")
		require.NoError(t, err)
		assert.Equal(t, l.Token(), in.Holder)
		for _, k := range in.Masters {
			assert.Equal(t, int64(1), k.Queued)
			assert.Len(t, k.Head, 30, "the head's id: stamp, client tag, random part")
		}
		cancel()
		<-got
		require.NoError(t, l.Unlock(context.Background()))
		time.Sleep(time.Second)
		synctest.Wait()
	})
}

// TestRelease: the break-glass release frees a lock by its token on every
// master and touches no key that holds another token; the masters where the
// key was another holder's are not counted.
func TestRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		servers, masters := memMasters(5)
		ctx := context.Background()
		c := virtualClient(t, masters)
		gone := virtualClient(t, masters) // a process that died holding the lock
		l, err := gone.TryLock(ctx, "job", time.Minute)
		require.NoError(t, err)
		synctest.Wait() // TryLock returns at a majority: the last SETs land now

		servers[0].Set("lock:job", "newer", time.Minute) // another holder's key there

		for _, bad := range []string{"", "q", "a\nb"} {
			_, err := c.Release(ctx, "job", bad)
			assert.ErrorIs(t, err, ErrInvalidArgument, "token %q", bad)
		}
		_, err = c.Release(ctx, "", l.Token())
		assert.ErrorIs(t, err, ErrInvalidArgument)

		n, err := c.Release(ctx, "job", "not-the-holder")
		require.NoError(t, err)
		assert.Zero(t, n)
		n, err = c.Release(ctx, "job", l.Token())
		require.NoError(t, err)
		assert.Equal(t, 4, n)
		v, _ := servers[0].Get("lock:job")
		assert.Equal(t, "newer", v, "a newer holder's key was released")
		for _, s := range servers[1:] {
			_, ok := s.Get("lock:job")
			assert.False(t, ok, "the gone holder's key is still on %s", s.Addr())
		}
		servers[0].Set("lock:job", "", 0)
		_, err = c.TryLock(ctx, "job", time.Minute)
		require.NoError(t, err, "the resource is free once released")
	})
}

// TestForceRelease: keys that split the masters between attempts whose
// owners are gone (no token on a majority) are released where they still
// hold what Inspect saw; a key set since (a newer holder's), a key of
// another type and a master with no key are left alone; an inspection of
// other masters is refused.
func TestForceRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		servers, masters := memMasters(5)
		ctx := context.Background()
		c := virtualClient(t, masters)
		servers[0].Set("lock:job", "a", time.Minute)
		servers[1].Set("lock:job", "a", time.Minute)
		servers[2].Set("lock:job", "b", time.Minute)
		servers[3].Set("lock:job", "c", time.Minute)
		seen, err := c.Inspect(ctx, "job")
		require.NoError(t, err)
		require.Empty(t, seen.Holder, "split keys read as held")

		servers[3].Set("lock:job", "newer", time.Minute) // a new holder's key since the inspection
		n, err := c.ForceRelease(ctx, seen)
		require.NoError(t, err)
		assert.Equal(t, 3, n)
		for i, s := range servers[:3] {
			_, ok := s.Get("lock:job")
			assert.False(t, ok, "master %d kept a key seen", i)
		}
		v, _ := servers[3].Get("lock:job")
		assert.Equal(t, "newer", v, "a key set since the inspection was released")

		other := seen
		other.Masters = seen.Masters[:4]
		_, err = c.ForceRelease(ctx, other)
		assert.ErrorIs(t, err, ErrInvalidArgument)
		other.Masters = append([]MasterKey(nil), seen.Masters...)
		other.Masters[0].Addr = "elsewhere:6379"
		_, err = c.ForceRelease(ctx, other)
		assert.ErrorIs(t, err, ErrInvalidArgument)
		_, err = c.ForceRelease(ctx, Inspection{Resource: "", Masters: seen.Masters})
		assert.ErrorIs(t, err, ErrInvalidArgument)
	})
}

// TestInspectRealServer: inspect.lua's replies on redis-server and
// miniredis read as on memredis: a holder with its TTL, a key of another
// type, no key.
func TestInspectRealServer(t *testing.T) {
	_, real, _ := realMasters(t, 3)
	_, mini := miniMasters(t, 3)
	for name, masters := range map[string][]Master{"redis-server": real, "miniredis": mini} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c, err := New(masters)
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Close() })
			l, err := c.TryLock(ctx, "job", time.Minute)
			require.NoError(t, err)
			// TryLock returns at a majority: the last SET may land later.
			require.Eventually(t, func() bool {
				in, err := c.Inspect(ctx, "job")
				for _, k := range in.Masters {
					if k.Token != l.Token() {
						return false
					}
				}
				return err == nil
			}, 10*time.Second, 10*time.Millisecond, "the lock's key is not on every master")
			_, err = masters[0].Eval(ctx, driver.NewScript("redis.call('HSET', KEYS[1], 'f', 'v') return 1"), []string{"lock:hash"})
			require.NoError(t, err)
			in, err := c.Inspect(ctx, "job")
			require.NoError(t, err)
			assert.Equal(t, l.Token(), in.Holder)
			for _, k := range in.Masters {
				assert.Equal(t, l.Token(), k.Token)
				assert.Greater(t, k.TTL, 50*time.Second)
				assert.LessOrEqual(t, k.TTL, time.Minute)
			}
			assert.False(t, in.FenceKnown, "a fence without WithFence")
			in, err = c.Inspect(ctx, "hash")
			require.NoError(t, err)
			assert.True(t, in.Masters[0].WrongType)
			assert.Equal(t, MasterKey{Addr: in.Masters[1].Addr}, in.Masters[1])
			n, err := c.Release(ctx, "job", l.Token())
			require.NoError(t, err)
			assert.Equal(t, 3, n)
			assert.ErrorIs(t, l.Unlock(ctx), ErrLockNotHeld, "the holder's keys were not released")
		})
	}
}

// TestInspectFence: the inspection reads the fence counter's value without
// minting: none before the first lock, the lock's fence after it, the same
// after another Inspect.
func TestInspectFence(t *testing.T) {
	_, masters := miniMasters(t, 3)
	node := miniredis.RunT(t)
	counter, err := fence.NewRedisCounter(goredis.Conn(newClient(t, node.Addr())))
	require.NoError(t, err)
	c, err := New(masters, WithFence(counter))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	in, err := c.Inspect(ctx, "job")
	require.NoError(t, err)
	assert.False(t, in.FenceKnown, "a counter before any mint")
	assert.NoError(t, in.FenceErr)
	l, err := c.TryLock(ctx, "job", time.Minute)
	require.NoError(t, err)
	f, _ := l.Fence()
	for range 2 {
		in, err = c.Inspect(ctx, "job")
		require.NoError(t, err)
		assert.True(t, in.FenceKnown)
		assert.Equal(t, f, in.Fence, "Inspect minted, or read another value")
	}
	node.Set(fence.Key("job"), "x")
	in, err = c.Inspect(ctx, "job")
	require.NoError(t, err)
	assert.ErrorIs(t, in.FenceErr, fence.ErrCounter)
}
