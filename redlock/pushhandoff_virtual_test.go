package redlock

import (
	"context"
	"strings"
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
)

// Handoff between clients: a release hands the key to the queue's head
// with the token of the head's latest attempt (its entry's claim), and the
// head, told by the masters' messages, holds the lock with no round of its
// own (takePushed).

// TestHandoffBetweenClientsTakesNoRound: a waiter of another client gets
// the lock in the instant of the release, sends no attempt after it, and
// its lease counts from its latest attempt's start, before its keys were
// set.
func TestHandoffBetweenClientsTakesNoRound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		servers, masters := memMasters(5)
		ctx := context.Background()
		a := virtualClient(t, masters, WithFairness(3*time.Second))
		var votes atomic.Int64
		b := virtualClient(t, masters, WithFairness(3*time.Second),
			WithHooks(Hooks{Vote: func(context.Context, Event) { votes.Add(1) }}))
		held, err := a.TryLock(ctx, "job", time.Minute)
		require.NoError(t, err)
		const ttl = 10 * time.Second
		waiting := lockAsync(ctx, b, "job", ttl)
		time.Sleep(time.Millisecond)
		synctest.Wait()
		// A waiter of a third client queued behind it: b claims the key at
		// its next refresh (fair.Line.Claims), seeing another client queued.
		d := virtualClient(t, masters, WithFairness(3*time.Second))
		dctx, dcancel := context.WithCancel(ctx)
		behind := lockAsync(dctx, d, "job", ttl)
		time.Sleep(5500 * time.Millisecond) // queued; its entry refreshed every second
		synctest.Wait()
		before := votes.Load()
		require.NotZero(t, before)
		released := time.Now()
		require.NoError(t, held.Unlock(ctx))
		r := <-waiting
		require.NoError(t, r.err)
		assert.Equal(t, released, r.at, "not handed over at the release")
		assert.Equal(t, before, votes.Load(), "the waiter made an attempt after the release")
		assert.Equal(t, uint64(1), fairOf(b).Taken(), "not taken from the masters' handoff")
		lease := b.lease(ttl)
		assert.False(t, r.l.Until().After(released.Add(lease)), "the lease counts from after the keys were set")
		assert.True(t, r.l.Until().After(released.Add(lease-b.cfg.fairTTL/3-time.Millisecond)), "the lease starts earlier than the latest attempt")
		synctest.Wait()
		// The waiter left the queue on the masters it did not count: a
		// release that reaches one after that deletes the key there.
		holding := 0
		for _, s := range servers {
			// (A master the holder did not count may have handed the key
			// on to the waiter queued behind.)
			if v, ok := s.Get("lock:job"); ok && v == r.l.Token() {
				assert.LessOrEqual(t, s.TTL("lock:job"), ttl)
				holding++
			}
		}
		assert.GreaterOrEqual(t, holding, b.quorum)
		_, err = a.TryLock(ctx, "job", ttl)
		assert.ErrorIs(t, err, ErrNotAcquired)
		dcancel()
		require.ErrorIs(t, (<-behind).err, context.Canceled)
		require.NoError(t, r.l.Unlock(ctx))
		synctest.Wait()
		for _, s := range servers {
			assert.Empty(t, s.Keys(), "left on %s", s.Addr())
		}
	})
}

// TestHandedToWaiterThatLeft: a waiter that gives up after a release
// handed it the key on a minority of masters (another waiter, queued
// there ahead of it, got the rest) releases those keys as it leaves, and
// they go on to the waiter behind it; a lock that wins keeps its token.
func TestHandedToWaiterThatLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		servers, masters := memMasters(5)
		ctx := context.Background()
		a := virtualClient(t, masters, WithFairness(3*time.Second))
		b := virtualClient(t, masters, WithFairness(3*time.Second))
		c := virtualClient(t, masters, WithFairness(3*time.Second))
		held, err := a.TryLock(ctx, "job", time.Minute)
		require.NoError(t, err)
		bctx, bcancel := context.WithCancel(ctx)
		first := lockAsync(bctx, b, "job", time.Minute)
		time.Sleep(time.Millisecond)
		synctest.Wait()
		cctx, ccancel := context.WithCancel(ctx)
		second := lockAsync(cctx, c, "job", time.Minute)
		time.Sleep(time.Millisecond)
		synctest.Wait()
		// A round ends at a majority, and its calls to the others may be
		// cancelled before they ran: the holder's key is put on every
		// master by hand, and the waiters refresh their entries until
		// both are on every master.
		for _, s := range servers {
			s.Set("lock:job", held.Token(), time.Minute)
		}
		count := driver.NewScript(fair.QueueLua + `local q = queue_of(KEYS[1]) return #redis.call('ZRANGE', q, 0, -1)`)
		everywhere := false
		for range 30 {
			everywhere = true
			for _, s := range servers {
				n, err := s.Conn().Eval(ctx, count, []string{"lock:job"})
				require.NoError(t, err)
				everywhere = everywhere && n == int64(2)
			}
			if everywhere {
				break
			}
			time.Sleep(time.Second)
			synctest.Wait()
		}
		require.True(t, everywhere, "the waiters' entries are not on every master")
		// One more refresh: each has seen the other queued, and claims the key.
		time.Sleep(time.Second)
		synctest.Wait()
		// A waiter of another library, ahead of both, on masters 2-4.
		ahead := driver.NewScript(fair.QueueLua + `local q, e, h = queue_of(KEYS[1])
redis.call('ZADD', q, 1, ARGV[1])
redis.call('ZADD', e, now_ms() + 60000, ARGV[1])
redis.call('HSET', h, ARGV[1], 'other 60000')
return 1`)
		for _, s := range servers[2:] {
			_, err := s.Conn().Eval(ctx, ahead, []string{"lock:job"}, "00000000000001ffffffff00000000")
			require.NoError(t, err)
		}
		require.NoError(t, held.Unlock(ctx))
		synctest.Wait()
		handed := make([]string, 5)
		for i, s := range servers {
			handed[i], _ = s.Get("lock:job")
		}
		require.NotEmpty(t, handed[0])
		assert.Equal(t, handed[0], handed[1], "b's claim")
		for i, v := range handed[2:] {
			if !assert.Equal(t, "other", v) {
				s := servers[2+i]
				t.Logf("%s: keys %v ttl %v", s.Addr(), s.Keys(), s.TTL("lock:job"))
			}
		}
		select {
		case r := <-first:
			t.Fatalf("b returned with a minority: %v", r.err)
		default:
		}
		bcancel()
		r := <-first
		require.ErrorIs(t, r.err, context.Canceled)
		synctest.Wait()
		for _, s := range servers[:2] {
			v, _ := s.Get("lock:job")
			assert.NotEmpty(t, v, "on %s", s.Addr())
			assert.NotEqual(t, handed[0], v, "b's key is left on %s", s.Addr())
		}
		v0, _ := servers[0].Get("lock:job")
		v1, _ := servers[1].Get("lock:job")
		assert.Equal(t, v0, v1, "c's claim")
		ccancel()
		w := <-second
		require.ErrorIs(t, w.err, context.Canceled)
		synctest.Wait()
		for _, s := range servers[:2] {
			_, ok := s.Get("lock:job")
			assert.False(t, ok, "c's key is left on %s", s.Addr())
		}
	})
}

// TestWokenWaitersAskOneMasterFirst: waiters of separate clients woken by
// one release all ask the resource's probe master first; one wins it and
// then the others, and every attempt refused there asked no other master,
// so the woken waiters cannot split the votes between them. (With every
// waiter asking every master at once, each of their attempts has a vote
// from every master.)
func TestWokenWaitersAskOneMasterFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		servers, masters := memMasters(5)
		ctx := context.Background()
		holderC := virtualClient(t, masters)
		held, err := holderC.TryLock(ctx, "job", time.Minute)
		require.NoError(t, err)
		for _, s := range servers { // its calls the round no longer needed may not have run
			s.Set("lock:job", held.Token(), time.Minute)
		}
		p := holderC.probeMaster("job")
		// Each waiter is a client of its own; its attempts are one after
		// another, so the votes between two Attempt calls are one
		// attempt's.
		type attempt struct {
			votes map[string]string
			err   error
		}
		const waiters = 4
		var mu sync.Mutex
		var released bool
		after := make([][]attempt, waiters) // each waiter's attempts after the release
		results := make([]<-chan lockResult, waiters)
		for w := range results {
			votes := map[string]string{}
			hooks := WithHooks(Hooks{
				Vote: func(_ context.Context, e Event) {
					mu.Lock()
					votes[e.Master] = e.Outcome
					mu.Unlock()
				},
				Attempt: func(_ context.Context, e Event) {
					mu.Lock()
					if released {
						after[w] = append(after[w], attempt{votes, e.Err})
					}
					votes = map[string]string{}
					mu.Unlock()
				},
			})
			results[w] = lockAsync(ctx, virtualClient(t, masters, hooks), "job", time.Minute)
		}
		synctest.Wait()
		before, readsBefore := attemptCalls(servers[p]), holderReads(servers)
		mu.Lock()
		released = true
		mu.Unlock()
		releasedAt := time.Now()
		require.NoError(t, held.Unlock(ctx))
		// One wins; the others sleep on its key (for a minute, were it not
		// released: the test goroutine waits as long as it must).
		var won *Lock
		var pending []<-chan lockResult
		for won == nil {
			synctest.Wait()
			pending = pending[:0]
			for _, r := range results {
				select {
				case got := <-r:
					require.NoError(t, got.err)
					require.Nil(t, won, "two waiters won")
					won = got.l
				default:
					pending = append(pending, r)
				}
			}
			if won == nil {
				time.Sleep(time.Millisecond)
			}
		}
		assert.Less(t, time.Since(releasedAt), time.Second, "no waiter won at the release")
		assert.GreaterOrEqual(t, attemptCalls(servers[p])-before, waiters, "a woken waiter did not ask the probe master")
		// The probe's refusal said who holds the key: the waiters that lost
		// there did not read it again (one call each, before probe.lua).
		assert.Zero(t, holderReads(servers)-readsBefore, "holder reads after the probe master refused")
		probeAddr := servers[p].Addr()
		mu.Lock()
		for w, as := range after {
			for _, a := range as {
				if a.err != nil && a.votes[probeAddr] == "refused" {
					assert.Len(t, a.votes, 1, "waiter %d, refused by the probe master, asked others: %v", w, a.votes)
				}
				assert.NotErrorIs(t, a.err, ErrVotesSplit, "waiter %d: %v (probe master %s)", w, a.votes, probeAddr)
			}
		}
		mu.Unlock()
		// The others take turns, each releasing as soon as it wins.
		var wg sync.WaitGroup
		for _, r := range pending {
			wg.Go(func() {
				got := <-r
				if assert.NoError(t, got.err) {
					assert.NoError(t, got.l.Unlock(ctx))
				}
			})
		}
		require.NoError(t, won.Unlock(ctx))
		wg.Wait()
	})
}

// holderReads is how many holder.lua calls the servers ran (memredis
// counts a script by its first line).
func holderReads(servers []*memredis.Server) (n int) {
	first, _, _ := strings.Cut(holderLua, "\n")
	for _, s := range servers {
		n += s.Calls(first)
	}
	return n
}

// TestRecentWaiterAsksOneMasterFirst: a fresh Lock of a client that waited
// on the resource within the last second (its subscription lingers) asks
// the probe master first, as a woken waiter does: a releaser taking its
// next turn does not race the waiters its release woke on every master. A
// client that never waited asks every master at once.
func TestRecentWaiterAsksOneMasterFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		servers, masters := memMasters(5)
		ctx := context.Background()
		other := virtualClient(t, masters)
		c := virtualClient(t, masters)
		p := c.probeMaster("job")
		sets := func() (probe, rest int) {
			for i, s := range servers {
				if i == p {
					probe += attemptCalls(s)
				} else {
					rest += attemptCalls(s)
				}
			}
			return probe, rest
		}

		// Never waited: every master at once.
		l, err := c.Lock(ctx, "job", time.Minute)
		require.NoError(t, err)
		synctest.Wait() // the calls the majority did not need
		probe, rest := sets()
		assert.Equal(t, 1, probe)
		assert.Equal(t, 4, rest, "an uncontended Lock did not ask every master at once")
		require.NoError(t, l.Unlock(ctx))

		// Wait once: c's Lock loses to other's lock and waits for it.
		held := waitOnce(t, ctx, c, other)

		// Within the second: the fresh Lock's first attempt asks the probe
		// master, which refuses, and no other.
		synctest.Wait()
		probe0, rest0 := sets()
		got := lockAsync(ctx, c, "job", time.Minute)
		synctest.Wait()
		probe, rest = sets()
		assert.Equal(t, 1, probe-probe0, "the first attempt did not ask the probe master")
		assert.Equal(t, 0, rest-rest0, "the first attempt of a recent waiter asked every master")
		require.NoError(t, held.Unlock(ctx))
		r := <-got
		require.NoError(t, r.err)
		require.NoError(t, r.l.Unlock(ctx))
	})
}

// TestRecentFairWaiterQueuesAtOnce: the fair twin: a fresh Lock of a fair
// client on a resource it waited on within the last second makes a queued
// attempt first, with no plain SET NX round (it would only lose where
// others take turns); once the second has passed, an uncontended Lock takes
// the key with the plain round again.
func TestRecentFairWaiterQueuesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		servers, masters := memMasters(5)
		ctx := context.Background()
		other := virtualClient(t, masters, WithFairness(time.Second))
		c := virtualClient(t, masters, WithFairness(time.Second))
		sets := func() (n int) {
			for _, s := range servers {
				n += attemptCalls(s)
			}
			return n
		}

		// Wait once: c's Lock loses to other's lock, queues and waits.
		held := waitOnce(t, ctx, c, other)

		// Within the second: no SET NX, a queued attempt, and the lock
		// once other releases it.
		synctest.Wait()
		before := sets()
		got := lockAsync(ctx, c, "job", time.Minute)
		synctest.Wait()
		assert.Equal(t, before, sets(), "a recent fair waiter's Lock began with a plain round")
		require.NoError(t, held.Unlock(ctx))
		r := <-got
		require.NoError(t, r.err)
		require.NoError(t, r.l.Unlock(ctx))

		// A second later, uncontended: the plain round, which wins.
		time.Sleep(2 * time.Second)
		before = sets()
		l, err := c.Lock(ctx, "job", time.Minute)
		require.NoError(t, err)
		synctest.Wait()
		assert.Equal(t, before+len(servers), sets(), "an uncontended Lock did not take the plain round")
		require.NoError(t, l.Unlock(ctx))
	})
}

// waitOnce makes c's Lock of "job" wait once: it loses to a lock of
// other's, is woken by its release and wins; then other takes "job" again,
// and that lock is returned, held.
func waitOnce(t *testing.T, ctx context.Context, c, other *Client) *Lock {
	t.Helper()
	held, err := other.TryLock(ctx, "job", time.Minute)
	require.NoError(t, err)
	got := lockAsync(ctx, c, "job", time.Minute)
	synctest.Wait()
	require.NoError(t, held.Unlock(ctx))
	r := <-got
	require.NoError(t, r.err)
	require.NoError(t, r.l.Unlock(ctx))
	held, err = other.TryLock(ctx, "job", time.Minute)
	require.NoError(t, err)
	return held
}

// TestHandoffBetweenClientsWakesPlainWaiters: a release that hands the key
// to another client's queued waiter (its claim) tells the waiters that
// sleep on the released token, also those of a client without fairness:
// such a waiter wakes, reads the new holder, and takes the lock after the
// fair waiters' turns. Before, a handoff with a claim was published only
// on the head's client's channel: the plain waiter slept until the
// released key's expiry (a minute here; 10 s, the whole TTL, in a crowd
// of 100 callers over eight clients, half of them fair, on redis-servers).
func TestHandoffBetweenClientsWakesPlainWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		servers, masters := memMasters(3)
		const res = "job"
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		holderC := virtualClient(t, masters)
		plainC := virtualClient(t, masters)
		holder, err := holderC.TryLock(ctx, res, time.Minute)
		require.NoError(t, err)
		// Two fair clients' waiters: each sees the other's entry, so
		// each claims the key (a release hands it over with the claim).
		var queued []<-chan lockResult
		for range 2 {
			queued = append(queued, lockAsync(ctx, virtualClient(t, masters, WithFairness(time.Second)), res, time.Minute))
			time.Sleep(time.Millisecond)
		}
		time.Sleep(time.Second) // their entries refreshed with their claims, asleep
		waiting := lockAsync(ctx, plainC, res, time.Minute)
		synctest.Wait()
		require.True(t, sleepsOn(plainC, res, holder.Token()), "the plain waiter does not sleep on the holder's token")

		require.NoError(t, holder.Unlock(ctx))
		synctest.Wait()
		for _, s := range servers {
			v, _ := s.Get("lock:" + res)
			require.NotEqual(t, "q", v, "handed over without a claim: not the case this test is about")
		}
		for range queued {
			var q lockResult
			select {
			case q = <-queued[0]:
			case q = <-queued[1]:
			}
			require.NoError(t, q.err)
			time.Sleep(10 * time.Millisecond)
			require.NoError(t, q.l.Unlock(ctx))
		}
		released := time.Now()
		select {
		case w := <-waiting:
			require.NoError(t, w.err)
			assert.Less(t, w.at.Sub(released), time.Second, "the plain waiter took the lock long after the last release")
			require.NoError(t, w.l.Unlock(ctx))
		case <-time.After(time.Minute + time.Second):
			t.Fatal("the plain waiter slept through the handoffs and the releases")
		}
	})
}
