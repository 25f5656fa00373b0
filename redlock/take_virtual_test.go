package redlock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/driver"
	"quorumlock.dev/redlock/internal/fair"
)

// switchMinter mints fences, or fails while fail is set.
type switchMinter struct {
	fail atomic.Bool
	next atomic.Uint64
}

var errCounterDown = errors.New("counter down")

func (m *switchMinter) Mint(ctx context.Context, resource string) (uint64, error) {
	if m.fail.Load() {
		return 0, errCounterDown
	}
	return m.next.Add(1), nil
}

// staleReleases is a master that records the calls of handoff.lua that
// remove queue entries left behind (ARGV[5] on).
type staleReleases struct {
	driver.Conn
	mu      *sync.Mutex
	removed *[][]any
}

func (s staleReleases) Eval(ctx context.Context, script *driver.Script, keys []string, args ...any) (any, error) {
	if script == fair.HandoffScript && len(args) > 4 {
		s.mu.Lock()
		*s.removed = append(*s.removed, args[4:])
		s.mu.Unlock()
	}
	return s.Conn.Eval(ctx, script, keys, args...)
}

// TestFailedTakeKeepsEntryVirtual: a fair waiter passed the lock in-process
// that cannot take it (the fence counter is down) goes on waiting, and its
// queue entry stays queued: the release that frees the lock it did not take
// must not remove that entry as one left behind by a waiter that took the
// lock. It did, found by the simulator: the release then also deleted the
// key the waiter's next attempt had set there, when it reached a master
// after that attempt, leaving the waiter's lock on fewer than a majority.
func TestFailedTakeKeepsEntryVirtual(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		servers, mems := memMasters(3)
		var mu sync.Mutex
		var removed [][]any
		masters := make([]Master, len(mems))
		for i, m := range mems {
			masters[i] = staleReleases{Conn: m, mu: &mu, removed: &removed}
		}
		minter := &switchMinter{}
		c := virtualClient(t, masters, WithFairness(3*time.Second), WithFence(minter))
		ctx := context.Background()

		holder, err := c.Lock(ctx, "job", 10*time.Second)
		require.NoError(t, err)
		won := make(chan *Lock, 1)
		go func() {
			l, err := c.Lock(ctx, "job", 10*time.Second)
			if assert.NoError(t, err) {
				won <- l
			}
		}()
		synctest.Wait() // queued on the masters, behind the holder

		minter.fail.Store(true)
		require.NoError(t, holder.Unlock(ctx)) // passed on in-process; the take fails
		synctest.Wait()
		assert.EqualValues(t, 1, fairOf(c).Passed(), "the lock was not passed on in-process")
		mu.Lock()
		assert.Empty(t, removed, "a release removed the entry of a waiter still queued")
		mu.Unlock()

		minter.fail.Store(false)
		select {
		case l := <-won:
			synctest.Wait() // the calls of its round that outlive the majority
			for i, s := range servers {
				v, ok := s.Get("lock:job")
				assert.True(t, ok && v == l.Token(), "master %d does not hold the waiter's key", i)
			}
			require.NoError(t, l.Unlock(ctx))
		case <-time.After(20 * time.Second):
			t.Fatal("the waiter never took the lock")
		}
	})
}

// slowScript delays one script by delay before it reaches the master, as
// a slow link to that one master would; its other calls are prompt.
type slowScript struct {
	full
	script *driver.Script
	delay  time.Duration
}

func (s slowScript) Eval(ctx context.Context, script *driver.Script, keys []string, args ...any) (any, error) {
	if script == s.script {
		time.Sleep(s.delay)
	}
	return s.full.Eval(ctx, script, keys, args...)
}

// TestHandoffOutrunByLeaveVirtual: a lock handed to a waiter of the same
// client by a handoff round whose call to one master is slow (within the
// node timeout) ends with the waiter's key on every master. The waiter,
// once its Lock returned, removes its queue entry where the round did not;
// that removal reached the slow master before the handoff did, the handoff
// then found no head there and released the key instead of handing it:
// the lock held on 4 of 5 masters (seen ~1 run in 30 of
// TestFairDirectHandoff on redis-server).
func TestHandoffOutrunByLeaveVirtual(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		servers, mems := memMasters(5)
		masters := append([]Master(nil), mems...)
		masters[4] = slowScript{full: mems[4].(full), script: fair.HandoffScript, delay: 10 * time.Millisecond}
		c := virtualClient(t, masters, WithFairness(time.Second))
		ctx := context.Background()

		holder, err := c.TryLock(ctx, "job", 30*time.Second)
		require.NoError(t, err)
		won := make(chan *Lock, 1)
		go func() {
			l, err := c.Lock(ctx, "job", time.Minute) // twice the holder's TTL: handed by a round, not passed
			if assert.NoError(t, err) {
				won <- l
			}
		}()
		synctest.Wait() // queued on every master
		require.NoError(t, holder.Unlock(ctx))
		l := <-won
		assert.EqualValues(t, 1, fairOf(c).Handed(), "not handed over by a handoff round")
		time.Sleep(time.Second) // every call and leave of the handoff has ended
		for i, s := range servers {
			v, ok := s.Get("lock:job")
			assert.True(t, ok && v == l.Token(), "master %d: key %q, not the handed lock's", i, v)
		}
		require.NoError(t, l.Unlock(ctx))
		time.Sleep(time.Second) // the release on the slow master (handoff.lua too: it removes the entry) ends
	})
}

// TestUnlockRemovesEntryLeftBehindVirtual: a fair waiter, queued ahead of
// another client's, claims the key on every master; the old holder's
// release reaches four of them first, and the waiter holds the lock there
// while the fifth still queues its entry, whose claim is the lock's token.
// The leave that removes that entry is slow, and the lock is unlocked
// before it arrives; the old holder's release on the fifth master then
// hands the key to the claim. The leave keeps a key that holds the won
// lock's token (while the lock is held it is part of it), so unless the
// entry goes with Unlock's own release the key stayed there for a TTL after
// Unlock (the simulator, seed 1234226749272432728).
func TestUnlockRemovesEntryLeftBehindVirtual(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		servers, mems := memMasters(5)
		masters := append([]Master(nil), mems...)
		masters[4] = slowScript{full: mems[4].(full), script: fair.LeaveScript, delay: 40 * time.Millisecond} // the leave
		c := virtualClient(t, masters, WithFairness(time.Second))
		ctx := context.Background()
		// Another client's lock, and another client's waiter queued last
		// (a stamp from the far future): the waiter below claims the key.
		other := driver.NewScript(fair.QueueLua + `
local q, e = queue_of(KEYS[1])
redis.call('ZADD', q, 72057594037927935, ARGV[1])
redis.call('ZADD', e, now_ms() + 60000, ARGV[1])
return 1`)
		for _, m := range mems {
			_, err := m.Eval(ctx, other, []string{"lock:job"}, "ffffffffffffffzzzzzzzz00000000")
			require.NoError(t, err)
		}
		for _, s := range servers {
			s.Set("lock:job", "old", 30*time.Second)
		}
		won := make(chan *Lock, 1)
		go func() {
			l, err := c.Lock(ctx, "job", time.Minute)
			if assert.NoError(t, err) {
				won <- l
			}
		}()
		synctest.Wait() // queued on every master; it saw the other client's waiter
		release := func(i int) {
			_, err := mems[i].Eval(ctx, releaseScript, []string{"lock:job"}, "old")
			require.NoError(t, err)
		}
		release(0) // wakes the waiter: it takes master 0 and claims the key on the others
		synctest.Wait()
		for i := 1; i < 4; i++ {
			release(i) // each hands the key to the claim
		}
		l := <-won
		v, _ := servers[4].Get("lock:job")
		require.Equal(t, "old", v)
		require.NoError(t, l.Unlock(ctx)) // before the leave reaches master 4
		release(4)
		time.Sleep(time.Second) // the leave has landed
		for i, s := range servers {
			v, ok := s.Get("lock:job")
			assert.False(t, ok && v == l.Token(), "master %d keeps the lock's key after Unlock", i)
		}
	})
}
