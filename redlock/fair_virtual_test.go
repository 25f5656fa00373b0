package redlock

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/driver"
	"quorumlock.dev/redlock/internal/fair"
	"quorumlock.dev/redlock/internal/wait"
)

// TestFairOrderVirtual: waiters of separate fair clients (separate
// processes) get the lock in the order they came, each from its
// predecessor's release in the same virtual instant (handed over by the
// release script and pushed, not by a timer), on masters that run the
// shipped fair_lock.lua and release.lua.
func TestFairOrderVirtual(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, masters := memMasters(3)
		ctx := context.Background()
		clients := make([]*Client, 4)
		for i := range clients {
			clients[i] = virtualClient(t, masters, WithFairness(3*time.Second))
		}
		holder, err := clients[0].TryLock(ctx, "job", time.Minute)
		require.NoError(t, err)

		type win struct {
			who int
			l   *Lock
			at  time.Time
		}
		wins := make(chan win, 3)
		for who := 1; who <= 3; who++ {
			go func() {
				l, err := clients[who].Lock(ctx, "job", time.Minute)
				if assert.NoError(t, err, "waiter %d", who) {
					wins <- win{who, l, time.Now()}
				}
			}()
			time.Sleep(time.Millisecond) // arrivals a millisecond apart
			synctest.Wait()              // queued on the masters
		}
		synctest.Wait()
		select {
		case w := <-wins:
			t.Fatalf("waiter %d won while the lock was held", w.who)
		default:
		}
		released := time.Now()
		require.NoError(t, holder.Unlock(ctx))
		for want := 1; want <= 3; want++ {
			w := <-wins
			assert.Equal(t, want, w.who, "out of arrival order")
			// At the release's instant, or after the random pause of a
			// wake-up that found the masters mid-release (a busy machine
			// runs the release's calls in another order): never after a
			// timer (the entry's refresh, 1 s; the TTL).
			assert.WithinDuration(t, released, w.at, wait.MaxWakeBackoff, "not handed over at the release")
			time.Sleep(10 * time.Millisecond)
			released = time.Now()
			require.NoError(t, w.l.Unlock(ctx))
		}
	})
}

// TestFairNoQueueVirtual: a resource whose key can have no queue (a '}'
// outside a hash tag) is waited for without one by fair clients: waiters of
// two clients get the lock at the holder's release, pushed, in one virtual
// instant, and no queue key is ever made.
func TestFairNoQueueVirtual(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		servers, masters := memMasters(3)
		ctx := context.Background()
		a := virtualClient(t, masters, WithFairness(3*time.Second))
		b := virtualClient(t, masters, WithFairness(3*time.Second))
		const res = "odd}name"
		holder, err := a.TryLock(ctx, res, time.Minute)
		require.NoError(t, err)
		got := make(chan time.Time, 2)
		var wg sync.WaitGroup
		defer wg.Wait()
		for _, c := range []*Client{a, b} {
			wg.Go(func() {
				l, err := c.Lock(ctx, res, time.Minute)
				if assert.NoError(t, err) {
					got <- time.Now()
					time.Sleep(10 * time.Millisecond)
					assert.NoError(t, l.Unlock(ctx))
				}
			})
		}
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Empty(t, got, "a waiter won while the lock was held")
		released := time.Now()
		require.NoError(t, holder.Unlock(ctx))
		first := <-got
		assert.Equal(t, released, first, "not woken by the release")
		second := <-got
		assert.Less(t, second.Sub(first), time.Second, "the second waiter waited past the first's release")
		for _, s := range servers {
			for _, k := range s.Keys() {
				assert.NotContains(t, k, "lockq", "a queue key on %s", s.Addr())
				assert.NotContains(t, k, "lockt", "a queue key on %s", s.Addr())
				assert.NotContains(t, k, "lockh", "a queue key on %s", s.Addr())
			}
		}
	})
}

// TestMixedDeploymentStarvesPlainClient shows why WithFairness's doc asks
// every client of a resource for the same setting: while fair waiters keep
// queuing, every release leaves the key reserved for the queue's head, and
// a client without fairness, which cannot take a reservation, waits as long
// as they keep coming (here 3 s without a lock while a fair client's two
// goroutines took 20 ms turns). The fair client is not held up. Found by
// the simulator's liveness invariant, which therefore checks only the fair
// clients' waits in a mixed deployment.
func TestMixedDeploymentStarvesPlainClient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		_, masters := memMasters(5)
		fair := virtualClient(t, masters, WithFairness(time.Second))
		plain := virtualClient(t, masters)
		stop := make(chan struct{})
		var turns sync.WaitGroup
		var mu sync.Mutex
		sections := 0
		for range 2 {
			turns.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					l, err := fair.Lock(ctx, "mixed", 500*time.Millisecond)
					if err != nil {
						continue
					}
					time.Sleep(20 * time.Millisecond)
					mu.Lock()
					sections++
					mu.Unlock()
					_ = l.Unlock(ctx)
				}
			})
		}
		time.Sleep(100 * time.Millisecond)
		wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		l, err := plain.Lock(wctx, "mixed", 500*time.Millisecond)
		close(stop)
		turns.Wait()
		if err == nil {
			_ = l.Unlock(ctx)
		}
		require.ErrorIs(t, err, context.DeadlineExceeded, "the client without fairness got the lock: the starvation this test documents did not happen")
		assert.Greater(t, sections, 100, "the fair client's goroutines were held up too")
	})
}

// TestFairHeadLeavesWakesNext: a free key whose queue's head gives up
// (its Lock's context ended) while the waiter behind it, refused because
// it was not the head, sleeps: the head's leave wakes the new head at
// once. Without it the new head slept up to a third of the entry TTL with
// the resource free and waiters queued (the simulator's crowd seeds 110
// and 329, 340 ms).
func TestFairHeadLeavesWakesNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, masters := memMasters(3)
		ctx := context.Background()
		c := virtualClient(t, masters, WithFairness(3*time.Second), WithRetry(0, 10*time.Second, 0))
		const gone = "00000000000001" + "ffffffff" + "-gone" // a waiter of another client, queued first
		queue := driver.NewScript(`local t = redis.call('TIME')
redis.call('ZADD', KEYS[1], 1, ARGV[1])
redis.call('ZADD', KEYS[2], tonumber(t[1]) * 1000 + 10000, ARGV[1])
redis.call('SET', KEYS[3], 'another', 'PX', 60000)
return 1`)
		del := driver.NewScript(`return redis.call('DEL', KEYS[1])`)
		for _, m := range masters {
			_, err := m.Eval(ctx, queue, []string{"lockqu:{lock:job}", "locktu:{lock:job}", "lock:job"}, gone)
			require.NoError(t, err)
		}
		got := make(chan time.Time, 1)
		go func() {
			l, err := c.Lock(ctx, "job", time.Minute)
			if assert.NoError(t, err) {
				got <- time.Now()
				assert.NoError(t, l.Unlock(ctx))
			}
		}()
		time.Sleep(100 * time.Millisecond)
		synctest.Wait() // queued behind gone, the key held by another
		for _, m := range masters {
			_, err := m.Eval(ctx, del, []string{"lock:job"}) // it expires, say: no release message
			require.NoError(t, err)
		}
		time.Sleep(1500 * time.Millisecond) // its next attempt: a free key, gone the head
		synctest.Wait()
		require.Empty(t, got, "won while another waiter was the queue's head")
		left := time.Now()
		for _, m := range masters {
			_, err := m.Eval(ctx, fair.LeaveScript, []string{"lock:job"}, gone)
			require.NoError(t, err)
		}
		won := <-got
		assert.Less(t, won.Sub(left), 50*time.Millisecond, "the new head slept with the key free after the head left")
	})
}
