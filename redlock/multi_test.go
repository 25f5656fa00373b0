package redlock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLockAllAllOrNothing: a lock on three resources sets all three keys on a
// majority, one fence each; a second LockAll that shares one resource is
// refused and leaves none of its keys behind; Unlock releases them together.
func TestLockAllAllOrNothing(t *testing.T) {
	servers, masters := miniMasters(t, 5)
	m := &countingMinter{}
	c := newTestClient(t, masters, WithFence(m))
	ctx := context.Background()
	base := resourceName(t)
	a, b, x := base+":sku:1", base+":sku:2", base+":sku:3"

	l, err := c.TryLockAll(ctx, []string{x, a, b}, time.Second)
	require.NoError(t, err)
	assert.Equal(t, []string{a, b, x}, l.Resources(), "sorted")
	assert.Equal(t, a, l.Resource())
	fences, ok := l.Fences()
	require.True(t, ok)
	require.Len(t, fences, 3)
	assert.Less(t, fences[0], fences[1])
	assert.Less(t, fences[1], fences[2])
	f, _ := l.Fence()
	assert.Equal(t, fences[0], f)
	for _, r := range l.Resources() {
		settle(t, servers, r, l)
	}

	other := base + ":sku:9"
	_, err = c.TryLockAll(ctx, []string{other, b}, time.Second)
	require.ErrorIs(t, err, ErrNotAcquired)
	require.Eventually(t, func() bool { return holders(t, servers, other, "") == 0 && !servers[0].Exists("lock:"+other) },
		time.Second, time.Millisecond)
	for _, s := range servers {
		assert.False(t, s.Exists("lock:"+other), "a refused LockAll set a key")
	}

	require.NoError(t, l.Extend(ctx, 2*time.Second))
	require.NoError(t, l.Unlock(ctx))
	// Unlock returns at a majority; the rest follow.
	require.Eventually(t, func() bool {
		return holders(t, servers, a, l.Token())+holders(t, servers, b, l.Token())+holders(t, servers, x, l.Token()) == 0
	}, time.Second, time.Millisecond)
	l2, err := c.TryLockAll(ctx, []string{other, b}, time.Second)
	require.NoError(t, err)
	require.NoError(t, l2.Unlock(ctx))
}

// TestLockAllExtendNeedsEveryKey: a master where one of the keys was lost does
// not count toward the extension's majority.
func TestLockAllExtendNeedsEveryKey(t *testing.T) {
	servers, masters := miniMasters(t, 3)
	c := newTestClient(t, masters)
	ctx := context.Background()
	base := resourceName(t)
	l, err := c.TryLockAll(ctx, []string{base + ":a", base + ":b"}, time.Second)
	require.NoError(t, err)
	for _, r := range l.Resources() {
		settle(t, servers, r, l)
	}
	servers[0].Del("lock:" + base + ":a")
	servers[1].Del("lock:" + base + ":b")
	err = l.Extend(ctx, time.Second)
	require.ErrorIs(t, err, ErrLockNotHeld)
	<-l.Done()
	// A failed Extend releases what the lock still held, every key of it.
	require.Eventually(t, func() bool {
		return holders(t, servers, base+":a", l.Token())+holders(t, servers, base+":b", l.Token()) == 0
	}, time.Second, time.Millisecond)
}

func TestLockAllBadInput(t *testing.T) {
	_, masters := miniMasters(t, 3)
	c := newTestClient(t, masters)
	ctx := context.Background()
	for _, rs := range [][]string{nil, {}, {"a", "b", "a"}, {"a", ""}} {
		_, err := c.TryLockAll(ctx, rs, time.Second)
		assert.ErrorIs(t, err, ErrInvalidArgument, "%q", rs)
		_, err = c.LockAll(ctx, rs, time.Second)
		assert.ErrorIs(t, err, ErrInvalidArgument, "%q", rs)
	}
	_, err := c.TryLockAll(ctx, []string{"a"}, 0)
	assert.ErrorIs(t, err, ErrInvalidArgument)
}

func TestSameHashTag(t *testing.T) {
	assert.True(t, sameHashTag([]string{"{order:42}:sku:1", "{order:42}:sku:2"}))
	assert.False(t, sameHashTag([]string{"{order:42}:sku:1", "{order:43}:sku:2"}))
	assert.False(t, sameHashTag([]string{"order:42:sku:1", "order:42:sku:2"}))
	assert.False(t, sameHashTag([]string{"{}:a", "{}:b"}), "an empty tag hashes the whole key")
	assert.True(t, sameHashTag([]string{"{x}"}))
}

// TestLockAllMutualExclusion: goroutines taking overlapping sets never hold a
// resource at once.
func TestLockAllMutualExclusion(t *testing.T) {
	_, masters := miniMasters(t, 3)
	c := newTestClient(t, masters, WithRetry(0, time.Millisecond, 2*time.Millisecond))
	base := resourceName(t)
	sets := [][]string{{base + ":1", base + ":2"}, {base + ":2", base + ":3"}, {base + ":3", base + ":1"}}
	var inside [4]atomic.Int32
	var violations, sections atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			set := sets[g%3]
			for ctx.Err() == nil {
				l, err := c.LockAll(ctx, set, time.Second)
				if err != nil {
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Error(err)
					}
					return
				}
				idx := []int{int(set[0][len(set[0])-1] - '0'), int(set[1][len(set[1])-1] - '0')}
				for _, i := range idx {
					if inside[i].Add(1) > 1 {
						violations.Add(1)
					}
				}
				time.Sleep(time.Millisecond)
				for _, i := range idx {
					inside[i].Add(-1)
				}
				sections.Add(1)
				_ = l.Unlock(context.Background())
			}
		})
	}
	wg.Wait()
	assert.Zero(t, violations.Load())
	assert.Greater(t, sections.Load(), int64(10))
}
