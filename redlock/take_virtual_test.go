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
	"quorumlock.dev/internal/harness/memredis"
	"quorumlock.dev/redlock/internal/fair"
	"quorumlock.dev/redlock/internal/wait"
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

// holdOut makes servers refuse connections long enough (idle: more than
// the breaker's quiet time) for c's breaker to hold its calls to them
// back, then lets c probe them: for the next node timeout, c's calls to
// them are not made (errStuck). They keep refusing until the test says.
// Call it inside the bubble.
func holdOut(t *testing.T, c *Client, servers []*memredis.Server, idle time.Duration) {
	t.Helper()
	ctx := context.Background()
	for _, s := range servers {
		s.Fail(errors.New("connection refused"))
	}
	for _, wait := range []time.Duration{idle, time.Millisecond} { // the failures, then the probes
		l, err := c.TryLock(ctx, "holdout", time.Minute)
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
		time.Sleep(wait)
	}
}

// TestChainReleaseReachesStuckMasters: the release of a lock passed on
// in-process removes the queue entries that the waiters of its chain left
// on the masters (they do not leave the queue themselves: the lock's
// release does it). It must reach every master, also those the lock's
// acquiring round never called because their breaker held the calls
// back: nothing of the lock is there, but the entries may be (a waiter's
// earlier attempt, or its lost attempt's undo, put them there). Without
// that, a waiter that held the lock and is gone stayed the head of those
// masters' queues until its entry expired, and waiters whose heads the
// other masters named could not take a majority: a free resource with
// waiters and no holder for up to the entry's TTL (the simulator, crowd
// seed 1234226749272425182: after a latency spike, 364 ms). The chain's
// entry is put on the lock as the fair policy does it (Keep, the release
// handoff.lua with the entries to remove).
func TestChainReleaseReachesStuckMasters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		servers, masters := memMasters(5)
		c := virtualClient(t, masters, WithFairness(time.Second))
		ctx := context.Background()
		const gone = "00000000000001" + "ffffffff" + "-gone" // a waiter of the chain, now gone
		queue := driver.NewScript(fair.QueueLua + `
local q, e = queue_of(KEYS[1])
redis.call('ZADD', q, 1, ARGV[1])
redis.call('ZADD', e, now_ms() + 60000, ARGV[1])
return 1`)
		queued := driver.NewScript(fair.QueueLua + `
local q = queue_of(KEYS[1])
return redis.call('ZSCORE', q, ARGV[1]) and 1 or 0`)
		for _, m := range masters {
			_, err := m.Eval(ctx, queue, []string{"lock:job"}, gone)
			require.NoError(t, err)
		}

		holdOut(t, c, servers[3:], time.Second)
		l, err := c.TryLock(ctx, "job", time.Minute)
		require.NoError(t, err)
		time.Sleep(100 * time.Millisecond) // the round's calls to them have ended
		for i := 3; i < 5; i++ {
			_, err, ok := l.round.Returned(i)
			require.True(t, ok)
			require.ErrorIs(t, err, errStuck, "master %d was called", i)
		}
		servers[3].Fail(nil)
		servers[4].Fail(nil)

		policyCore{c}.Keep(l, nil, &wait.Script{Script: fair.HandoffScript, Args: []any{l.Token(), "", "", 0, gone}})
		require.NoError(t, l.Unlock(ctx))
		time.Sleep(time.Second) // background releases and their retries
		for i, m := range masters {
			v, err := m.Eval(ctx, queued, []string{"lock:job"}, gone)
			require.NoError(t, err)
			assert.Equal(t, int64(0), v, "master %d still queues the chain's entry after the release", i)
		}
	})
}

// TestHandOffFromChainReachesStuckMasters: the handoff round of a lock
// passed on in-process asks the masters where the chain's acquiring call
// returned; on the others the chain's entries must go too. Here W1 wins
// while its client's breaker holds calls to masters 3 and 4 back, passes
// the lock to W2 (whose entry is on every master), and W2's Unlock hands
// it to W3, behind another client's waiter X. W2's entry stayed on masters
// 3 and 4, the head of their queues, until it expired (the simulator's
// crowd seed 1234226749272425182, where it kept a free resource from its
// waiters for 364 ms).
func TestHandOffFromChainReachesStuckMasters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		servers, masters := memMasters(5)
		ctx := context.Background()
		c := virtualClient(t, masters, WithFairness(time.Second))
		other := virtualClient(t, masters, WithFairness(time.Second))
		queued := driver.NewScript(fair.QueueLua + `
local q = queue_of(KEYS[1])
return #redis.call('ZRANGE', q, 0, -1)`)
		entries := func(i int) int64 {
			v, err := masters[i].Eval(ctx, queued, []string{"lock:job"})
			require.NoError(t, err)
			return v.(int64)
		}
		hx, err := other.TryLock(ctx, "job", time.Minute)
		require.NoError(t, err)
		w1 := lockAsync(ctx, c, "job", time.Minute)
		time.Sleep(time.Millisecond)
		w2 := lockAsync(ctx, c, "job", time.Minute)
		time.Sleep(400 * time.Millisecond) // W2's first queued attempt: at its line's refresh
		x := lockAsync(ctx, other, "job", time.Minute)
		time.Sleep(time.Millisecond)
		w3 := lockAsync(ctx, c, "job", time.Minute)
		time.Sleep(400 * time.Millisecond)
		synctest.Wait()
		for i := range masters {
			require.Equal(t, int64(4), entries(i), "master %d: W1, W2, X and W3 queued", i)
		}

		holdOut(t, c, servers[3:], 250*time.Millisecond)
		require.NoError(t, hx.Unlock(ctx)) // W1, the head, takes masters 0-2
		r1 := <-w1
		require.NoError(t, r1.err)
		time.Sleep(100 * time.Millisecond)
		for i := 3; i < 5; i++ {
			_, err, ok := r1.l.round.Returned(i)
			require.True(t, ok)
			require.ErrorIs(t, err, errStuck, "master %d was called", i)
		}
		servers[3].Fail(nil)
		servers[4].Fail(nil)

		require.NoError(t, r1.l.Unlock(ctx)) // passed on to W2 in-process
		r2 := <-w2
		require.NoError(t, r2.err)
		require.Equal(t, r1.l.Token(), r2.l.Token(), "W2 was not passed W1's lock")
		require.NoError(t, r2.l.Unlock(ctx)) // handed to W3, behind X
		for _, w := range []<-chan lockResult{x, w3} {
			r := <-w
			require.NoError(t, r.err)
			require.NoError(t, r.l.Unlock(ctx))
		}
		time.Sleep(200 * time.Millisecond) // background leaves and their retries; W2's entry expires later
		synctest.Wait()
		for i := range masters {
			assert.Zero(t, entries(i), "master %d still queues entries after every waiter left", i)
		}
	})
}
