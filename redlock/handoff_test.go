package redlock

import (
	"context"
	"quorumlock.dev/redlock/internal/fair"
	"quorumlock.dev/redlock/internal/push"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFairDirectHandoff: a release hands the lock to a queued waiter of the
// same client in its own round (the holder's lease has too little of the
// waiter's TTL left to pass it on as it is): the waiter's key is on every
// master, its entry is gone, and no reservation is left.
func TestFairDirectHandoff(t *testing.T) {
	masters, admin := waitMasters(t, 5)
	res := resourceName(t)
	c := fairClient(t, masters, defaultFairEntryTTL)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	holder, waiting := heldWithWaiter(ctx, t, c, admin, &res)
	require.NoError(t, holder.Unlock(ctx))
	w := <-waiting
	require.NoError(t, w.err)
	assert.Equal(t, uint64(1), fairOf(c).Handed(), "the lock was not handed over by the release")
	assert.Zero(t, fairOf(c).Passed(), "passed on a lease with half the waiter's TTL")
	assert.NotEqual(t, holder.Token(), w.l.Token())
	heldEverywhere(t, admin, res, w.l)
	queuedOn(t, admin, res, 0)
	assert.Greater(t, time.Until(w.l.Until()), 50*time.Second, "the handed lease is not counted from the handoff")
	require.NoError(t, w.l.Unlock(ctx))
	nothingLeft(t, admin, res, defaultFairEntryTTL/2)
}

// TestFairHandoffKeepsOrderAcrossClients: a waiter of another client that
// queued first gets the lock before a later waiter of the releaser's own
// client: the release hands over only to the head of the masters' queue.
func TestFairHandoffKeepsOrderAcrossClients(t *testing.T) {
	masters, admin := waitMasters(t, 3)
	res := resourceName(t)
	mine := fairClient(t, masters, defaultFairEntryTTL)
	other := fairClient(t, masters, defaultFairEntryTTL)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	holder := heldFor(ctx, t, mine, admin, res)
	first := lockAsync(ctx, other, res, time.Minute)
	queuedOn(t, admin, res, 1)
	second := lockAsync(ctx, mine, res, time.Minute)
	queuedOn(t, admin, res, 2)
	require.NoError(t, holder.Unlock(ctx))

	r := <-first
	require.NoError(t, r.err, "the waiter that queued first did not get the lock")
	select {
	case s := <-second:
		t.Fatalf("the releaser's own waiter cut in (err %v)", s.err)
	case <-time.After(50 * time.Millisecond):
	}
	assert.Zero(t, fairOf(mine).Handed(), "handed to a waiter that was not the head")
	assert.Zero(t, fairOf(mine).Passed(), "passed on over a waiter of another client")
	require.NoError(t, r.l.Unlock(ctx))
	s := <-second
	require.NoError(t, s.err)
	require.NoError(t, s.l.Unlock(ctx))
}

// TestFairHandoffUnderLoad: goroutines of one fair client, some giving up
// at random, take turns; no two hold at once, most handoffs are direct, and
// no key or queue entry is left behind.
func TestFairHandoffUnderLoad(t *testing.T) {
	masters, admin := waitMasters(t, 5)
	res := resourceName(t)
	c := fairClient(t, masters, defaultFairEntryTTL)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const workers, perWorker = 6, 15
	var (
		inside           exclusive
		sections, gaveUp atomic.Int32
		wg               sync.WaitGroup
	)
	for k := range workers {
		wg.Go(func() {
			for j := range perWorker {
				lctx, lcancel := ctx, context.CancelFunc(func() {})
				if (k+j)%5 == 4 {
					// Give up while queued, sometimes just as a release hands
					// the lock over.
					lctx, lcancel = context.WithTimeout(ctx, time.Duration(1+j%3)*time.Millisecond)
				}
				l, err := c.Lock(lctx, res, 10*time.Second)
				lcancel()
				if err != nil {
					if !assert.ErrorIs(t, err, context.DeadlineExceeded) {
						return
					}
					gaveUp.Add(1)
					continue
				}
				inside.hold()
				assert.NoError(t, l.Unlock(ctx))
				sections.Add(1)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int32(1), inside.most.Load(), "two holders at once")
	assert.Equal(t, int32(workers*perWorker), sections.Load()+gaveUp.Load())
	direct := fairOf(c).Handed() + fairOf(c).Passed()
	assert.Greater(t, direct, uint64(sections.Load()/2), "fewer than half the sections were handed over directly")
	t.Logf("%d sections, %d handed over in a round, %d passed on, %d gave up", sections.Load(), fairOf(c).Handed(), fairOf(c).Passed(), gaveUp.Load())
	// Entries of waiters that gave up while a call was in flight expire
	// with the entry TTL; nothing lives longer.
	nothingLeft(t, admin, res, 2*defaultFairEntryTTL)
}

// TestFairPassOn: when only waiters of the releasing client are queued
// ahead of the head and the lease has most of the head's TTL left, the lock
// passes to it with no round: same token and lease, a fence of its own, the
// masters untouched; its entry leaves the queue, and its Unlock frees the
// key.
func TestFairPassOn(t *testing.T) {
	masters, admin := waitMasters(t, 3)
	res := resourceName(t)
	minter := &countingMinter{}
	c := newTestClient(t, masters, WithFairness(defaultFairEntryTTL), WithNodeTimeout(250*time.Millisecond), WithFence(minter))
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	holder := lockEverywhere(t, c, admin, &res, time.Minute)
	waiting := lockAsync(ctx, c, res, time.Minute)
	queuedOn(t, admin, res, 1)
	// Its attempt's replies read: it knows only its client's waiters are
	// ahead of it (none).
	listedHere(t, c, res, func(ws []fair.State) bool { return len(ws) == 1 && ws[0].Covered })
	lease := holder.Until() // Until of an unlocked lock is its Unlock's time
	require.NoError(t, holder.Unlock(ctx))
	w := <-waiting
	require.NoError(t, w.err)
	assert.Equal(t, uint64(1), fairOf(c).Passed(), "not passed on")
	assert.Zero(t, fairOf(c).Handed())
	assert.Equal(t, holder.Token(), w.l.Token())
	// Until reads two clocks (the monotonic and the one that counts suspend), which drift apart by ns.
	assert.WithinDuration(t, lease, w.l.Until(), time.Millisecond, "a passed lock has its predecessor's lease")
	f0, _ := holder.Fence()
	f1, ok := w.l.Fence()
	require.True(t, ok)
	assert.Greater(t, f1, f0, "the new holder has no fence of its own")
	assert.ErrorIs(t, holder.Unlock(ctx), ErrLockNotHeld, "the first holder can still release")
	heldEverywhere(t, admin, res, w.l)
	// Its entry stays queued while it holds (the release removes it),
	// unless it expires first.
	assert.Len(t, fairOf(c).Stale(w.l), 1)
	require.NoError(t, w.l.Extend(ctx, time.Minute), "the new holder cannot extend")
	require.NoError(t, w.l.Unlock(ctx))
	nothingLeft(t, admin, res, defaultFairEntryTTL/2)
}

// TestFairPassKeepsOrderAcrossClients: a lock passed on in-process within
// one client never overtakes a waiter of another client that queued
// earlier: holder and first waiter of one client, then a waiter of another,
// then a second waiter of the first client; the lock goes holder, first
// waiter (passed on), the other client's waiter, second waiter.
func TestFairPassKeepsOrderAcrossClients(t *testing.T) {
	masters, admin := waitMasters(t, 3)
	res := resourceName(t)
	mine := fairClient(t, masters, defaultFairEntryTTL)
	other := fairClient(t, masters, defaultFairEntryTTL)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	holder := heldFor(ctx, t, mine, admin, res)
	first := lockAsync(ctx, mine, res, time.Minute)
	queuedOn(t, admin, res, 1)
	theirs := lockAsync(ctx, other, res, time.Minute)
	queuedOn(t, admin, res, 2)
	second := lockAsync(ctx, mine, res, time.Minute)
	// second queues here first: it puts its entry on the masters when next
	// in line, or at the refresh; either way its stamp is the latest.
	// first knows it heads the queue; second is listed.
	listedHere(t, mine, res, func(ws []fair.State) bool { return len(ws) == 2 && ws[0].Covered })
	require.NoError(t, holder.Unlock(ctx))

	f := <-first
	require.NoError(t, f.err)
	assert.Equal(t, uint64(1), fairOf(mine).Passed(), "the first waiter was not passed the lock in-process")
	require.NoError(t, f.l.Unlock(ctx))
	var got lockResult
	select {
	case got = <-theirs:
		require.NoError(t, got.err)
	case s := <-second:
		t.Fatalf("the second waiter of the releasing client overtook the other client's (err %v)", s.err)
	}
	select {
	case s := <-second:
		t.Fatalf("the second waiter got the lock while the other client held it (err %v)", s.err)
	case <-time.After(50 * time.Millisecond):
	}
	require.NoError(t, got.l.Unlock(ctx))
	s := <-second
	require.NoError(t, s.err)
	require.NoError(t, s.l.Unlock(ctx))
}

// heldWithWaiter locks *res with c on every master for 30 s, then starts a
// Lock of c for a minute and returns once it is queued on the masters and
// listed here (its attempt's replies read: a release can hand it the lock;
// before that, the release is a plain one, as CI saw on a loaded machine).
// The holder's lease is too short to pass on to it.
func heldWithWaiter(ctx context.Context, t *testing.T, c *Client, admin []*redis.Client, res *string) (*Lock, <-chan lockResult) {
	t.Helper()
	holder := lockEverywhere(t, c, admin, res, 30*time.Second)
	waiting := lockAsync(ctx, c, *res, time.Minute)
	queuedOn(t, admin, *res, 1)
	listedHere(t, c, *res, func(ws []fair.State) bool { return len(ws) == 1 })
	return holder, waiting
}

// listedHere waits until the waiters c lists for resource, in queue order,
// satisfy ok.
func listedHere(t *testing.T, c *Client, resource string, ok func([]fair.State) bool) {
	t.Helper()
	var last atomic.Pointer[[]fair.State] // Eventually's condition runs in a goroutine of its own
	if !assert.Eventually(t, func() bool {
		return fairOf(c).Inspect("lock:"+resource, func(ws []fair.State) bool {
			last.Store(&ws)
			return ok(ws)
		})
	}, 5*time.Second, time.Millisecond) {
		t.Fatalf("the waiters of this client are not listed as expected: last seen %+v", *last.Load())
	}
}

// lockEverywhere takes *res with c and returns once its key is on every
// master and every SET returned in time. On a loaded machine one master's SET may miss the node timeout
// (the lock holds on the others, and the tests that call this want every
// master in the same state): it then releases and tries again on a fresh
// resource, at most three times, and sets *res to the one it locked.
func lockEverywhere(t *testing.T, c *Client, admin []*redis.Client, res *string, ttl time.Duration) *Lock {
	t.Helper()
	ctx := context.Background()
	for try := range 3 {
		if try > 0 {
			*res = resourceName(t) + "-" + strconv.Itoa(try)
		}
		l, err := c.TryLock(ctx, *res, ttl)
		require.NoError(t, err)
		everywhere := false
		deadline := time.Now().Add(2 * time.Second)
		for ; !everywhere && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			everywhere = true
			for i, a := range admin {
				if v, err := a.Get(ctx, "lock:"+*res).Result(); err != nil || v != l.Token() {
					everywhere = false
				}
				// The client must know it too: a master whose SET returned
				// past the node timeout holds the key but is not the lock's
				// for a handoff round (it gets the plain release).
				if _, err, ok := l.round.Returned(i); !ok || err != nil {
					everywhere = false
				}
			}
		}
		if everywhere {
			return l
		}
		t.Logf("try %d: the key did not reach every master; again", try)
		_ = l.Unlock(ctx)
	}
	t.Fatal("the key never reached every master in three tries")
	return nil
}

// nothingLeft waits, at most within, until no master has resource's key,
// queue or entry deadlines, and logs what is left when some master still
// has one.
func nothingLeft(t *testing.T, admin []*redis.Client, resource string, within time.Duration) {
	t.Helper()
	ctx := context.Background()
	key := "lock:" + resource
	q, e, h, _ := queueKeys(key)
	if !assert.Eventually(t, func() bool {
		for _, a := range admin {
			if n, err := a.Exists(ctx, q, e, h, key).Result(); err != nil || n != 0 {
				return false
			}
		}
		return true
	}, within, time.Millisecond, "a key, queue or reservation is left") {
		for _, a := range admin {
			v, _ := a.Get(ctx, key).Result()
			pttl, _ := a.PTTL(ctx, key).Result()
			z, _ := a.ZRangeWithScores(ctx, e, 0, -1).Result()
			t.Logf("%s: key %q pttl %v, entries %v", a.Options().Addr, v, pttl, z)
		}
	}
}

// fairCalls counts the fair_lock.lua calls a master is sent.
type fairCalls struct{ n atomic.Int64 }

func (f *fairCalls) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f *fairCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (f *fairCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 1 && (args[1] == fair.LockScript.Hash() || args[1] == fair.LockScript.Source()) {
			f.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

// TestFairPassCoversBatch: waiters of one client that queued here behind
// its first waiter are passed the lock one after the other, in their
// order, with one fair_lock.lua round between them all: the attempt of the
// second, made during the first's section, covers those behind it.
func TestFairPassCoversBatch(t *testing.T) {
	masters, admin := waitMasters(t, 3)
	calls := &fairCalls{}
	raw(masters[0]).AddHook(calls)
	res := resourceName(t)
	// An entry TTL whose refresh (a third of it) comes long after the test
	// on a loaded machine: a refresh is a fair_lock.lua call of its own.
	c := fairClient(t, masters, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	holder := lockEverywhere(t, c, admin, &res, time.Minute)
	const n = 5
	var waiting [n]<-chan lockResult
	waiting[0] = lockAsync(ctx, c, res, time.Minute)
	queuedOn(t, admin, res, 1)
	listedHere(t, c, res, func(ws []fair.State) bool { return len(ws) == 1 })
	for i := 1; i < n; i++ {
		// One at a time, so that their stamps are in this order.
		waiting[i] = lockAsync(ctx, c, res, time.Minute)
		listedHere(t, c, res, func(ws []fair.State) bool { return len(ws) == i+1 })
	}
	queuedOn(t, admin, res, 1) // the others wait here, with no entry on the masters
	before := calls.n.Load()
	require.NoError(t, holder.Unlock(ctx))
	for i := range n {
		var r lockResult
		select {
		case r = <-waiting[i]:
			require.NoError(t, r.err)
		case <-ctx.Done():
			t.Fatalf("waiter %d never got the lock", i)
		}
		for j := i + 1; j < n; j++ {
			select {
			case o := <-waiting[j]:
				t.Fatalf("waiter %d got the lock while %d held it (err %v)", j, i, o.err)
			default:
			}
		}
		if i == 0 {
			// The second waiter's attempt, begun when the first took the
			// lock, has read its replies: its view covers it and the rest.
			listedHere(t, c, res, func(ws []fair.State) bool { return len(ws) == n-1 && ws[n-2].Covered })
		}
		assert.Equal(t, holder.Token(), r.l.Token(), "waiter %d was not passed the lock", i)
		require.NoError(t, r.l.Unlock(ctx))
	}
	assert.Equal(t, uint64(n), fairOf(c).Passed())
	assert.Zero(t, fairOf(c).Handed())
	assert.Equal(t, int64(1), calls.n.Load()-before, "fair_lock.lua rounds while the lock went down the line")
	nothingLeft(t, admin, res, defaultFairEntryTTL/2)
}

// sleepsOn reports whether a waiter of c on resource sleeps on token.
func sleepsOn(c *Client, resource, token string) bool {
	found := false
	c.push.Waiting("lock:"+resource, func(ws []*push.Waiter) {
		for _, w := range ws {
			found = found || w.Holder() == token
		}
	})
	return found
}

// TestFairHandoffWakesOtherWaiters: a direct handoff still tells the
// waiters of other clients that the releaser's token is gone. A client
// without fairness that sleeps on that token wakes, reads the new holder,
// and takes the lock at its release; before, it slept until the old key's
// expiry (10 s in a mixed run of TestFairMutualExclusion).
func TestFairHandoffWakesOtherWaiters(t *testing.T) {
	masters, admin := waitMasters(t, 3)
	res := resourceName(t)
	c := fairClient(t, masters, defaultFairEntryTTL)
	plain := newTestClient(t, masters, WithNodeTimeout(250*time.Millisecond))
	t.Cleanup(func() { _ = plain.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	holder, mine := heldWithWaiter(ctx, t, c, admin, &res)
	theirs := lockAsync(ctx, plain, res, time.Minute)
	require.Eventually(t, func() bool { return sleepsOn(plain, res, holder.Token()) }, 5*time.Second, time.Millisecond,
		"the other client's waiter does not sleep on the holder's token")
	require.NoError(t, holder.Unlock(ctx))
	m := <-mine
	require.NoError(t, m.err)
	require.Equal(t, uint64(1), fairOf(c).Handed(), "not a direct handoff")
	require.NoError(t, m.l.Unlock(ctx))
	released := time.Now()
	select {
	case r := <-theirs:
		require.NoError(t, r.err)
		assert.Less(t, r.at.Sub(released), 5*time.Second)
		require.NoError(t, r.l.Unlock(ctx))
	case <-ctx.Done():
		t.Fatal("the other client's waiter slept through the handoff and the release")
	}
}

// TestFairClientsTakeTurns: two fair clients, each with goroutines taking
// turns on one lock, in virtual time. Passing the lock on in-process within a client must
// not keep it there while the other client's waiters are queued: the
// sections of one client come in short runs, never one long run.
func TestFairClientsTakeTurns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { fairClientsTakeTurns(t) })
}

func fairClientsTakeTurns(t *testing.T) {
	_, masters := memMasters(3)
	const res = "job"
	clients := []*Client{virtualClient(t, masters, WithFairness(defaultFairEntryTTL)), virtualClient(t, masters, WithFairness(defaultFairEntryTTL))}
	ctx := context.Background()
	const perClient, sections = 3, 15
	var (
		mu     sync.Mutex
		order  []int // the client of each section, in order
		inside exclusive
		wg     sync.WaitGroup
	)
	for k := range 2 * perClient {
		c := k % 2
		wg.Go(func() {
			for range sections {
				l, err := clients[c].Lock(ctx, res, 10*time.Second)
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				order = append(order, c)
				mu.Unlock()
				inside.hold()
				assert.NoError(t, l.Unlock(ctx))
			}
		})
	}
	wg.Wait()
	require.Len(t, order, 2*perClient*sections)
	assert.Equal(t, int32(1), inside.most.Load(), "two holders at once")
	// The last sections of the client that finishes later run alone.
	tail := len(order) - 1
	for tail > 0 && order[tail-1] == order[len(order)-1] {
		tail--
	}
	longest, run := 1, 1
	for i := 1; i < tail; i++ {
		if order[i] == order[i-1] {
			run++
			longest = max(longest, run)
		} else {
			run = 1
		}
	}
	t.Logf("longest run of one client %d; passed %d + %d, handed %d + %d", longest,
		fairOf(clients[0]).Passed(), fairOf(clients[1]).Passed(), fairOf(clients[0]).Handed(), fairOf(clients[1]).Handed())
	assert.LessOrEqual(t, longest, 3*perClient, "one client kept the lock while the other's waiters were queued: %v", order)
}
