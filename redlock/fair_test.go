package redlock

import (
	"context"
	"fmt"
	"quorumlock.dev/driver"
	"quorumlock.dev/internal/harness/memredis"
	"quorumlock.dev/redlock/internal/fair"
	"quorumlock.dev/redlock/internal/push"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestQueueKeys: scripts/queue.lua names a lock's queue in the lock key's
// hash slot, or gives it none; queueKeys, the tests' copy of the rule,
// agrees with it.
func TestQueueKeys(t *testing.T) {
	tests := []struct {
		key, q, e, h string
		ok           bool
	}{
		{"lock:a", "lockqu:{lock:a}", "locktu:{lock:a}", "lockhu:{lock:a}", true},
		{"lock:{sku}:1", "lockq:{sku}:1", "lockt:{sku}:1", "lockh:{sku}:1", true},
		{"lock:a{b", "lockqu:{lock:a{b}", "locktu:{lock:a{b}", "lockhu:{lock:a{b}", true},
		{"lock:{}x", "", "", "", false}, // an empty tag is no tag, and the '}' ends any tag we make
		{"lock:a}b", "", "", "", false},
	}
	s := memredis.New()
	names := driver.NewScript(fair.QueueLua + "local q, e, h = queue_of(KEYS[1]) return {q or '', e or '', h or ''}")
	for _, tt := range tests {
		got, err := s.Conn().Eval(context.Background(), names, []string{tt.key})
		require.NoError(t, err, tt.key)
		assert.Equal(t, []any{tt.q, tt.e, tt.h}, got, tt.key)
		q, e, h, ok := queueKeys(tt.key)
		assert.Equal(t, tt.ok, ok, tt.key)
		assert.Equal(t, tt.q, q, tt.key)
		assert.Equal(t, tt.e, e, tt.key)
		assert.Equal(t, tt.h, h, tt.key)
	}
}

// queueKeys is scripts/queue.lua's queue_of, for tests that look at a
// queue on the masters.
func queueKeys(key string) (q, e, h string, ok bool) {
	r := strings.TrimPrefix(key, "lock:")
	if o := strings.IndexByte(r, '{'); o >= 0 {
		if n := strings.IndexByte(r[o+1:], '}'); n > 0 {
			return "lockq:" + r, "lockt:" + r, "lockh:" + r, true
		}
	}
	if strings.IndexByte(r, '}') >= 0 {
		return "", "", "", false
	}
	return "lockqu:{" + key + "}", "locktu:{" + key + "}", "lockhu:{" + key + "}", true
}

// fairClient is a fair client whose node timeout is as long as entryTTL
// allows, up to 250 ms: under -race on a loaded machine, a 50 ms call that
// times out leaves a holder on a bare majority, and the tests below want
// every master in the same state.
func fairClient(t *testing.T, masters []Master, entryTTL time.Duration) *Client {
	t.Helper()
	c := newTestClient(t, masters, WithFairness(entryTTL), WithNodeTimeout(min(entryTTL/4, 250*time.Millisecond)))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// heldFor takes resource with c for a minute and waits until its key is
// on every master.
func heldFor(ctx context.Context, t *testing.T, c *Client, admin []*redis.Client, resource string) *Lock {
	t.Helper()
	l, err := c.TryLock(ctx, resource, time.Minute)
	require.NoError(t, err)
	heldEverywhere(t, admin, resource, l)
	return l
}

// heldEverywhere waits until every server's key of resource holds l.
func heldEverywhere(t *testing.T, admin []*redis.Client, resource string, l *Lock) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, a := range admin {
			if v, err := a.Get(context.Background(), "lock:"+resource).Result(); err != nil || v != l.Token() {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond, "the holder's key is not on every master")
}

// queuedOn waits until every server has n entries in resource's queue.
func queuedOn(t *testing.T, admin []*redis.Client, resource string, n int64) {
	t.Helper()
	q, _, _, _ := queueKeys("lock:" + resource)
	if !assert.Eventually(t, func() bool {
		for _, a := range admin {
			if got, err := a.ZCard(context.Background(), q).Result(); err != nil || got != n {
				return false
			}
		}
		return true
	}, 10*time.Second, time.Millisecond, "not %d waiters queued on every master", n) {
		for _, a := range admin {
			z, _ := a.ZRangeWithScores(context.Background(), q, 0, -1).Result()
			v, _ := a.Get(context.Background(), "lock:"+resource).Result()
			t.Logf("%s: %v key %q", a.Options().Addr, z, v)
		}
		t.FailNow()
	}
}

// TestFairReleaserDoesNotCutIn: a holder that unlocks and calls Lock again
// at once gets the lock only after the waiter that was queued before it,
// for a plain resource and one with a hash tag (release.lua derives the
// queue's keys itself and must find them). In virtual time over in-memory
// masters that run the shipped scripts: on real ones under load a release
// that missed the node timeout left its key to expire.
func TestFairReleaserDoesNotCutIn(t *testing.T) {
	for _, res := range []string{"job", "{job}:x"} {
		t.Run(res, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				servers, masters := memMasters(3)
				holderC := virtualClient(t, masters, WithFairness(defaultFairEntryTTL))
				waiterC := virtualClient(t, masters, WithFairness(defaultFairEntryTTL))
				ctx := context.Background()

				first, err := holderC.TryLock(ctx, res, time.Minute)
				require.NoError(t, err)
				waiting := lockAsync(ctx, waiterC, res, time.Minute)
				q, e, _, _ := queueKeys("lock:" + res)
				synctest.Wait() // the waiter lost its attempt and is queued
				queued := 0
				for _, s := range servers {
					if s.Exists(q) {
						queued++
					}
				}
				// A call that the round no longer needed may have been
				// cancelled before it ran: a majority is what counts.
				require.GreaterOrEqual(t, queued, 2, "the waiter is not queued on a majority")
				// Arrival stamps are the clients' clocks in µs, and in a
				// bubble no time passes between the waiter's queueing and the
				// releaser's new Lock: their stamps would tie, and a tie
				// between two clients goes by their random tags (the releaser
				// was ahead in about one run in a thousand, when its queued
				// attempt reached the masters before the woken waiter's). A
				// later arrival has a later stamp on real clocks: let 1 ms pass.
				time.Sleep(time.Millisecond)
				require.NoError(t, first.Unlock(ctx))
				again := lockAsync(ctx, holderC, res, time.Minute)

				w := <-waiting
				require.NoError(t, w.err, "the queued waiter did not get the lock")
				select {
				case r := <-again:
					t.Fatalf("the releaser won while the waiter held the lock (err %v)", r.err)
				case <-time.After(50 * time.Millisecond):
				}
				require.NoError(t, w.l.Unlock(ctx))
				r := <-again
				require.NoError(t, r.err)
				assert.True(t, r.at.After(w.at))
				require.NoError(t, r.l.Unlock(ctx))
				// The winners removed their entries, or, where a call of
				// theirs ran after its round had ended, the entries expire.
				time.Sleep(defaultFairEntryTTL)
				synctest.Wait()
				for _, s := range servers {
					for _, k := range []string{q, e, "lock:" + res} {
						assert.False(t, s.Exists(k), "%s outlived its waiters on %s", k, s.Addr())
					}
				}
			})
		})
	}
}

// TestFairWaiterGivesUp: a queued waiter whose context ends leaves the
// queue, and the next waiter gets the lock at the release, not after the
// first one's entry expires.
func TestFairWaiterGivesUp(t *testing.T) {
	masters, admin := waitMasters(t, 3)
	res := resourceName(t)
	const entryTTL = 5 * time.Second // longer than the test waits for the second waiter
	c := fairClient(t, masters, entryTTL)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	holder := heldFor(ctx, t, c, admin, res)
	quitter, quit := context.WithCancel(ctx)
	gaveUp := lockAsync(quitter, c, res, time.Minute)
	queuedOn(t, admin, res, 1)
	later := lockAsync(ctx, c, res, time.Minute)
	// A waiter that finds one of its client's queued waits here first:
	// its entry goes to the masters when it is next in line.
	listedHere(t, c, res, func(ws []fair.State) bool { return len(ws) == 2 })
	quit()
	r := <-gaveUp
	require.ErrorIs(t, r.err, context.Canceled)
	queuedOn(t, admin, res, 1)

	require.NoError(t, holder.Unlock(ctx))
	released := time.Now()
	r = <-later
	require.NoError(t, r.err)
	assert.Less(t, r.at.Sub(released), entryTTL/2, "the waiter that gave up held up the queue")
	require.NoError(t, r.l.Unlock(ctx))
}

// dead is the id of queueDead's waiter: the earliest stamp there is.
const dead = "00000000000001" + "0000000000000000"

// queueDead writes on every master the queue entry of a waiter that died,
// ahead of every other, living entryTTL on each master's clock, with claim
// ('<token> <ttl ms>') unless it is "". It returns the entry's deadline on
// the last master.
func queueDead(ctx context.Context, t *testing.T, admin []*redis.Client, res string, entryTTL time.Duration, claim string) time.Time {
	t.Helper()
	q, e, h, _ := queueKeys("lock:" + res)
	var deadline time.Time
	for _, a := range admin {
		now, err := a.Time(ctx).Result()
		require.NoError(t, err)
		deadline = now.Add(entryTTL)
		require.NoError(t, a.ZAdd(ctx, q, redis.Z{Score: 1, Member: dead}).Err())
		require.NoError(t, a.ZAdd(ctx, e, redis.Z{Score: float64(deadline.UnixMilli()), Member: dead}).Err())
		if claim != "" {
			require.NoError(t, a.HSet(ctx, h, dead, claim).Err())
		}
	}
	return deadline
}

// TestFairDeadWaiter: the entry of a waiter that died (written by hand, with
// an earlier stamp) holds the queue until it expires, and no longer.
func TestFairDeadWaiter(t *testing.T) {
	masters, admin := waitMasters(t, 3)
	res := resourceName(t)
	const entryTTL = 600 * time.Millisecond
	c := fairClient(t, masters, entryTTL)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	holder := heldFor(ctx, t, c, admin, res)
	q, _, _, _ := queueKeys("lock:" + res)
	deadline := queueDead(ctx, t, admin, res, entryTTL, "")
	got := lockAsync(ctx, c, res, time.Minute)
	queuedOn(t, admin, res, 2)
	require.NoError(t, holder.Unlock(ctx))

	r := <-got
	require.NoError(t, r.err, "the dead waiter's entry never expired")
	assert.False(t, r.at.Before(deadline.Add(-10*time.Millisecond)), "won ahead of an entry that had not expired")
	// Purged by the winner's attempts, or by its leaving the masters it
	// did not win.
	assert.Eventually(t, func() bool {
		for _, a := range admin {
			if _, err := a.ZScore(ctx, q, dead).Result(); err != redis.Nil {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond, "the dead entry is still queued")
	require.NoError(t, r.l.Unlock(ctx))
}

// TestFairDeadHandedWaiter: a waiter that died with a claim on its entry
// (its latest attempt's token and TTL) is handed the key by the release,
// which it never takes: the key holds its token for the claim's TTL, as a
// holder that died holds the lock for its TTL (WithFairness's doc), and the
// next waiter wins once it expires, not before.
func TestFairDeadHandedWaiter(t *testing.T) {
	masters, admin := waitMasters(t, 3)
	res := resourceName(t)
	const entryTTL = 600 * time.Millisecond
	const claimTTL = 1500 * time.Millisecond
	c := fairClient(t, masters, entryTTL)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	holder := heldFor(ctx, t, c, admin, res)
	queueDead(ctx, t, admin, res, entryTTL, fmt.Sprintf("deadprefix.1 %d", claimTTL.Milliseconds()))
	got := lockAsync(ctx, c, res, time.Minute)
	queuedOn(t, admin, res, 2)
	released := time.Now()
	require.NoError(t, holder.Unlock(ctx))
	// Unlock returns at a majority; the last master is released after it.
	assert.Eventually(t, func() bool {
		for _, a := range admin {
			if v, _ := a.Get(ctx, "lock:"+res).Result(); v != "deadprefix.1" {
				return false
			}
		}
		return true
	}, time.Second, time.Millisecond, "the release did not hand the key to the dead head")

	r := <-got
	require.NoError(t, r.err, "the handed key never expired")
	assert.False(t, r.at.Before(released.Add(claimTTL-50*time.Millisecond)), "won %v after the release, before the dead head's key expired", r.at.Sub(released))
	require.NoError(t, r.l.Unlock(ctx))
}

// TestFairMutualExclusion: goroutines of two fair clients and one unfair
// one take turns on one resource, in virtual time over in-memory masters
// that run the shipped scripts; a holder count never goes above 1 and
// every section completes.
func TestFairMutualExclusion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, masters := memMasters(5)
		const res = "job"
		clients := []*Client{
			virtualClient(t, masters, WithFairness(defaultFairEntryTTL)),
			virtualClient(t, masters, WithFairness(defaultFairEntryTTL)),
			virtualClient(t, masters),
		}
		ctx := context.Background()
		const perWorker = 10
		var (
			inside exclusive
			done   atomic.Int32
			wg     sync.WaitGroup
		)
		for k := range 6 {
			c := clients[k%len(clients)]
			wg.Go(func() {
				for range perWorker {
					l, err := c.Lock(ctx, res, 10*time.Second)
					if !assert.NoError(t, err) {
						return
					}
					inside.hold()
					assert.NoError(t, l.Unlock(ctx))
					done.Add(1)
				}
			})
		}
		wg.Wait()
		assert.Equal(t, int32(1), inside.most.Load(), "two holders at once")
		assert.Equal(t, int32(6*perWorker), done.Load())
	})
}

// exclusive counts the goroutines inside a lock's critical sections.
type exclusive struct{ holding, most atomic.Int32 }

// hold is a 1 ms critical section; most is the most goroutines ever in one
// at once.
func (e *exclusive) hold() {
	n := e.holding.Add(1)
	for m := e.most.Load(); n > m && !e.most.CompareAndSwap(m, n); m = e.most.Load() {
	}
	time.Sleep(time.Millisecond)
	e.holding.Add(-1)
}

// TestFairTryLock: TryLock never queues: it fails while waiters are queued
// (the key is handed to them), and leaves no queue behind when it wins.
func TestFairTryLock(t *testing.T) {
	masters, admin := waitMasters(t, 3)
	res := resourceName(t)
	c := fairClient(t, masters, defaultFairEntryTTL)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	q, e, _, _ := queueKeys("lock:" + res)

	holder := heldFor(ctx, t, c, admin, res)
	for _, a := range admin {
		n, err := a.Exists(ctx, q, e).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "an uncontended TryLock made a queue")
	}
	waiting := lockAsync(ctx, c, res, time.Minute)
	queuedOn(t, admin, res, 1)
	_, err := c.TryLock(ctx, res, time.Minute)
	require.ErrorIs(t, err, ErrNotAcquired)
	queuedOn(t, admin, res, 1)

	require.NoError(t, holder.Unlock(ctx))
	w := <-waiting
	require.NoError(t, w.err)
	require.NoError(t, w.l.Unlock(ctx))
	l, err := c.TryLock(ctx, res, time.Minute)
	require.NoError(t, err, "TryLock after the queue emptied")
	require.NoError(t, l.Unlock(ctx))
}

func TestFairOptionValidated(t *testing.T) {
	_, masters := miniMasters(t, 1)
	for _, d := range []time.Duration{-time.Second, 199 * time.Millisecond} {
		_, err := New(masters, WithFairness(d))
		assert.ErrorIs(t, err, ErrInvalidArgument, strconv.Itoa(int(d)))
	}
	_, err := New(masters, WithFairness(200*time.Millisecond))
	assert.NoError(t, err)
}

// TestHandoffPublishedToHeadsClient: a release that hands the key to the
// queue's head publishes on the head's client's handoff channel
// (push.HandoffChannel), not on the key's channel, which every client
// waiting on the resource subscribes to: one client receives it, not all.
func TestHandoffPublishedToHeadsClient(t *testing.T) {
	s := memredis.New()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	const key, tag = "lock:pub", "abcdefgh"
	head := "00000000000001" + tag + "00000001"
	sub := s.Conn().(driver.Subscriber).Subscribe(ctx)
	defer sub.Close()
	require.NoError(t, sub.Subscribe(ctx, key, push.HandoffChannel(key, tag)))
	q, e, h, _ := queueKeys(key)
	s.Set(key, "holder", time.Minute)
	_, err := s.Conn().Eval(ctx, driver.NewScript("redis.call('ZADD', KEYS[1], 1, ARGV[1]) redis.call('ZADD', KEYS[2], 9999999999999, ARGV[1]) redis.call('HSET', KEYS[3], ARGV[1], 'p.1 2000') return 1"),
		[]string{q, e, h}, head)
	require.NoError(t, err)

	n, err := s.Conn().Eval(ctx, releaseScript, []string{key}, "holder")
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	msg, err := sub.Receive(ctx)
	require.NoError(t, err)
	assert.Equal(t, driver.Push{Channel: push.HandoffChannel(key, tag), Payload: "holder/" + head + "/p.1"}, msg)
	v, _ := s.Get(key)
	assert.Equal(t, "p.1", v, "the key was not handed to the head")

	// With nobody queued, the release is published on the key's channel.
	s.Set(key, "holder2", time.Minute)
	_, err = s.Conn().Eval(ctx, releaseScript, []string{key}, "holder2")
	require.NoError(t, err)
	msg, err = sub.Receive(ctx)
	require.NoError(t, err)
	assert.Equal(t, driver.Push{Channel: key, Payload: "holder2"}, msg)
}

// TestLostAttemptKeepsPlace: a queued waiter's attempt that took a free key
// as the queue's head left the queue there; when the attempt lost (too few
// masters), its undo puts the entry back at its stamp (fair_undo.lua), so
// that a later arrival queued on that master, with a claim, is not handed
// the key by the undo and does not come first at the next release.
// Without it a later waiter collected a majority first (simulator seed
// 4480757040280684745).
func TestLostAttemptKeepsPlace(t *testing.T) {
	s := memredis.New()
	ctx := context.Background()
	const key = "lock:place"
	early, late := "00000000000001aaaaaaaa00000001", "00000000000002bbbbbbbb00000002"
	attempt := func(id string, stamp int64, token, claim string) []any {
		t.Helper()
		prefix, _, _ := strings.Cut(token, ".")
		got, err := s.Conn().Eval(ctx, fair.LockScript, []string{key}, token, 2000, id, stamp, 3000, id[14:22], prefix, claim)
		require.NoError(t, err)
		return got.([]any)
	}
	undo := func(id string, stamp int64, token string) {
		t.Helper()
		n, err := s.Conn().Eval(ctx, fair.UndoScript, []string{key}, token, id, stamp, 3000)
		require.NoError(t, err)
		require.Equal(t, int64(1), n, "the undo did not find its key")
	}
	q, _, h, _ := queueKeys(key)

	require.Equal(t, []any{int64(1)}, attempt(early, 1, "a.1", ""), "the head takes the free key")
	require.Equal(t, int64(0), attempt(late, 2, "b.1", "1")[0], "the later waiter queues behind the key")
	undo(early, 1, "a.1") // the early waiter lost on the other masters
	v, ok := s.Get(key)
	assert.False(t, ok, "the undo handed the key to %q, a later arrival", v)
	first, err := s.Conn().Eval(ctx, driver.NewScript("return redis.call('ZRANGE', KEYS[1], 0, 0)"), []string{q})
	require.NoError(t, err)
	assert.Equal(t, []any{early}, first, "the early waiter lost its place")
	assert.Equal(t, int64(0), attempt(late, 2, "b.2", "1")[0], "the later waiter took the key ahead of the early one")
	assert.Equal(t, []any{int64(1)}, attempt(early, 1, "a.2", ""), "the early waiter's next attempt takes the key")

	// An undo that finds an earlier waiter queued ahead hands the key on to it.
	_, err = s.Conn().Eval(ctx, releaseScript, []string{key}, "a.2")
	require.NoError(t, err)
	require.Equal(t, []any{int64(1)}, attempt(late, 2, "b.3", ""), "the later waiter takes the free key as the head")
	require.Equal(t, int64(0), attempt(early, 1, "a.3", "1")[0], "the early waiter queues, claiming")
	undo(late, 2, "b.3")
	v, _ = s.Get(key)
	assert.Equal(t, "a.3", v, "the undo did not hand the key to the waiter ahead")
	claims, err := s.Conn().Eval(ctx, driver.NewScript("if redis.call('HGET', KEYS[1], ARGV[1]) then return 1 end return 0"), []string{h}, early)
	require.NoError(t, err)
	assert.Equal(t, int64(0), claims, "the handoff left a claim behind")
}
