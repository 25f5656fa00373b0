package redlock

// The waiting path's defects that a crowd meets, in virtual time over
// masters in memory: a key of the wrong type, a key with a huge TTL, a
// probe master that hangs, and releases that get no reply.

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
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
	"quorumlock.dev/redlock/internal/plain"
)

var (
	hashScript = driver.NewScript("redis.call('del', KEYS[1])\nreturn redis.call('hset', KEYS[1], 'f', 'v')")
	pxScript   = driver.NewScript("return redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])")
)

// eachMaster runs script on every master, as another client would.
func eachMaster(t *testing.T, masters []Master, script *driver.Script, keys []string, args ...any) {
	t.Helper()
	for _, m := range masters {
		_, err := m.Eval(context.Background(), script, keys, args...)
		require.NoError(t, err)
	}
}

// TestWaitingLockStopsOnWrongType: a waiting Lock, plain or fair, whose
// resource's key turns into a hash on every master while it waits stops
// with ErrWrongType at its next attempt. The plain waiter asked only its
// probe master, saw one refusal and polled until its context ended; the
// fair one's script failed on every master and it retried as
// ErrQuorumUnavailable.
func TestWaitingLockStopsOnWrongType(t *testing.T) {
	for _, fair := range []bool{false, true} {
		name := "plain"
		if fair {
			name = "fair"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				servers, masters := memMasters(5)
				var opts []Option
				if fair {
					opts = append(opts, WithFairness(time.Second))
				}
				waiter := virtualClient(t, masters, opts...)
				// Another process's key, for a second: no release of ours
				// hands anything over.
				for _, s := range servers {
					s.Set("lock:job", "another-process", time.Second)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				got := lockAsync(ctx, waiter, "job", time.Minute)
				time.Sleep(500 * time.Millisecond)
				synctest.Wait()
				// Something else takes the name with a hash on every master.
				eachMaster(t, masters, hashScript, []string{"lock:job"})
				start := time.Now()
				r := <-got
				require.ErrorIs(t, r.err, ErrWrongType)
				assert.NotErrorIs(t, r.err, context.DeadlineExceeded, "it waited for its context")
				assert.Less(t, r.at.Sub(start), 2*time.Second, "it stopped late")
				if fair {
					// It left the wait queue on every master, though its
					// key is a hash there: fair_leave.lua read the key,
					// failed with WRONGTYPE and kept the entry, to which a
					// release handed the key once the hash was gone (the
					// simulator's seed 3223549890145655879).
					time.Sleep(100 * time.Millisecond) // its leaving's calls, not the entries' TTL
					synctest.Wait()
					in, err := waiter.Inspect(context.Background(), "job")
					require.NoError(t, err)
					for i, m := range in.Masters {
						assert.Zero(t, m.Queued, "master %d keeps the waiter's entry", i)
					}
				}
			})
		})
	}
}

// TestHugeTTLDoesNotSpin: a key set with a PX beyond what a time.Duration
// holds (~9.2e12 ms; Redis takes far more, here 1e13) is waited for, not
// spun on. The
// wait read from the masters overflowed and came out negative, and a
// waiting Lock retried at once until its context ended: on three masters,
// 44,127 commands in 2 s (plain) and 240,314 (fair) on real servers.
func TestHugeTTLDoesNotSpin(t *testing.T) {
	for _, fair := range []bool{false, true} {
		name := "plain"
		if fair {
			name = "fair"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				_, masters := memMasters(3)
				var sent atomic.Int64
				counted := make([]Master, len(masters))
				for i, m := range masters {
					counted[i] = countingConn{m.(full), &sent}
				}
				// At most 20,000 attempts: a spin ends there instead of
				// hanging the bubble.
				opts := []Option{WithRetry(20000, 100*time.Millisecond, 0)}
				if fair {
					opts = append(opts, WithFairness(time.Second))
				}
				c := virtualClient(t, counted, opts...)
				eachMaster(t, masters, pxScript, []string{"lock:job"}, "squatter", int64(10_000_000_000_000))
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				_, err := c.Lock(ctx, "job", time.Minute)
				require.ErrorIs(t, err, ErrNotAcquired)
				assert.ErrorIs(t, err, context.DeadlineExceeded)
				t.Logf("%d commands in 2 s: %v", sent.Load(), err)
				// A poll every 100 ms at worst, and the fair waiter's
				// refreshes: a few per master each time.
				assert.Less(t, sent.Load(), int64(400), "the waiter spun on the key")
			})
		})
	}
}

// hangingProbe hangs the calls of one master once hang is set.
type hangingProbe struct {
	full
	hang *atomic.Bool
}

func (h hangingProbe) SetNX(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	if h.hang.Load() {
		<-ctx.Done()
		return false, ctx.Err()
	}
	return h.full.SetNX(ctx, key, value, ttl)
}

func (h hangingProbe) Eval(ctx context.Context, s *driver.Script, keys []string, args ...any) (any, error) {
	if h.hang.Load() {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return h.full.Eval(ctx, s, keys, args...)
}

// TestHungProbeMasterSkipped: a waiter woken by a release asks the probe
// master first; when that master hangs, the attempt asks the others a
// quarter of the node timeout into the round and wins there, in its first
// attempt (it used to wait out the node timeout and lose, then win in the
// next). No outage is reported: no vote, no error naming a healthy master
// (the round used to report ErrQuorumUnavailable naming every master, and
// the hooks an outage that did not happen).
func TestHungProbeMasterSkipped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, masters := memMasters(5)
		ctx := context.Background()
		holder := virtualClient(t, masters)
		p := holder.probeMaster("job")
		var hang atomic.Bool
		wrapped := append([]Master(nil), masters...)
		wrapped[p] = hangingProbe{masters[p].(full), &hang}
		var mu sync.Mutex
		var attempts []error
		votes := map[string]int{}
		waiter := virtualClient(t, wrapped, WithHooks(Hooks{
			Attempt: func(_ context.Context, e Event) {
				mu.Lock()
				attempts = append(attempts, e.Err)
				mu.Unlock()
			},
			Vote: func(_ context.Context, e Event) {
				mu.Lock()
				if e.Outcome != "agreed" && e.Outcome != "refused" {
					votes[e.Master]++
				}
				mu.Unlock()
			},
		}))
		held, err := holder.TryLock(ctx, "job", time.Minute)
		require.NoError(t, err)
		got := lockAsync(ctx, waiter, "job", time.Minute)
		time.Sleep(time.Second)
		synctest.Wait()
		mu.Lock()
		attempts, votes = nil, map[string]int{}
		mu.Unlock()
		hang.Store(true)
		released := time.Now()
		require.NoError(t, held.Unlock(ctx))
		r := <-got
		require.NoError(t, r.err)
		assert.Less(t, r.at.Sub(released), waiter.cfg.nodeTimeout/2, "the woken attempt waited for the hung probe master")
		mu.Lock()
		seen, failed := slices.Clone(attempts), maps.Clone(votes)
		mu.Unlock()
		hung := waiter.addrs[p]
		for _, err := range seen {
			for _, me := range masterErrors(err) {
				assert.Equal(t, hung, me.Addr, "an error names a healthy master that was never asked: %v", err)
			}
		}
		for addr := range failed {
			assert.Equal(t, hung, addr, "a failed vote of a master that was never asked")
		}
		hang.Store(false)
		time.Sleep(2 * waiter.cfg.nodeTimeout) // the hung call ends at its round's deadline
		synctest.Wait()
		assert.NoError(t, r.l.Unlock(ctx))
	})
}

// TestLateProbeRoundPolls: a woken waiter's round that went on without
// its probe master's answer, and lost to a client that took the lock
// meanwhile, does not count on that holder's release messages (one may
// have to come from the probe master, whose key it does not know): it
// looks again at the retry delay. Counting the probe master as the
// holder's, a waiter once slept until the key's expiry.
func TestLateProbeRoundPolls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, masters := memMasters(5)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		holder := virtualClient(t, masters)
		other := virtualClient(t, masters)
		p := holder.probeMaster("job")
		wrapped := append([]Master(nil), masters...)
		wrapped[p] = slowScript{masters[p].(full), plain.ProbeScript, defaultNodeTimeout / 2} // answers the probe late
		var attempts atomic.Int64
		waiter := virtualClient(t, wrapped, WithHooks(Hooks{Attempt: func(context.Context, Event) { attempts.Add(1) }}))
		held, err := holder.TryLock(ctx, "job", time.Minute)
		require.NoError(t, err)
		got := lockAsync(ctx, waiter, "job", time.Minute)
		time.Sleep(time.Second)
		synctest.Wait()
		require.NoError(t, held.Unlock(ctx))
		taken, err := other.TryLock(ctx, "job", time.Minute) // before the waiter's slow probe
		require.NoError(t, err)
		attempts.Store(0)
		time.Sleep(time.Second)
		synctest.Wait()
		// The retry delay is 50 ms and its jitter up to 50 ms: about 13
		// attempts in a second. Sleeping on the holder's release, one.
		assert.GreaterOrEqual(t, attempts.Load(), int64(5), "the waiter slept on a release message after a round without its probe master")
		require.NoError(t, taken.Unlock(ctx))
		r := <-got
		require.NoError(t, r.err)
		require.NoError(t, r.l.Unlock(ctx))
		time.Sleep(time.Second) // the late probe calls return
		synctest.Wait()
	})
}

// noReplyOnce drops the reply of the first release script sent to it, as
// a master whose answer is lost: the script ran or did not, the caller
// cannot tell.
type noReplyOnce struct {
	full
	dropped *atomic.Bool
	ran     bool           // whether the dropped call runs
	script  *driver.Script // the script whose reply is dropped; nil: release.lua
}

func (n noReplyOnce) Eval(ctx context.Context, s *driver.Script, keys []string, args ...any) (any, error) {
	if s == cmp.Or(n.script, releaseScript) && n.dropped.CompareAndSwap(false, true) {
		if n.ran {
			_, _ = n.full.Eval(ctx, s, keys, args...)
		}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return n.full.Eval(ctx, s, keys, args...)
}

// TestLostAttemptReleaseRetried: a lost attempt whose release gets no
// reply from a master (the key there may still be set) tries it again in
// the background until the master answers: its key is gone within a few
// node timeouts, not left for the TTL. Client.Close waits for such retries
// at most one node timeout.
func TestLostAttemptReleaseRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		servers, masters := memMasters(5)
		var dropped atomic.Bool
		wrapped := append([]Master(nil), masters...)
		wrapped[4] = noReplyOnce{full: masters[4].(full), dropped: &dropped}
		c := virtualClient(t, wrapped)
		for _, s := range servers[:3] {
			s.Set("lock:job", "another", time.Minute)
		}
		_, err := c.TryLock(context.Background(), "job", time.Minute)
		require.ErrorIs(t, err, ErrNotAcquired)
		require.True(t, dropped.Load(), "the release to master 4 was not sent")
		assert.True(t, exists(servers[4], "lock:job"), "the first release removed the key")
		time.Sleep(4 * c.cfg.nodeTimeout)
		synctest.Wait()
		assert.False(t, exists(servers[4], "lock:job"), "the lost attempt's key is left for its TTL")
		assert.Zero(t, c.pendingReleases())
	})
}

// TestCloseStopsReleaseRetries: retries to a master that never answers
// end with Close, which returns within one node timeout; until then they
// are tried, each bounded by the node timeout.
func TestCloseStopsReleaseRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		servers, masters := memMasters(3)
		c := virtualClient(t, masters)
		for _, s := range servers[:2] {
			s.Set("lock:job", "another", time.Minute)
		}
		servers[2].Hang()
		_, err := c.TryLock(context.Background(), "job", time.Minute)
		require.ErrorIs(t, err, ErrNotAcquired)
		time.Sleep(10 * c.cfg.nodeTimeout)
		assert.Equal(t, 1, c.pendingReleases(), "a release to the hung master waits to be tried again")
		start := time.Now()
		require.NoError(t, c.Close())
		assert.LessOrEqual(t, time.Since(start), c.cfg.nodeTimeout)
		servers[2].Resume()
		synctest.Wait()
	})
}

func exists(s *memredis.Server, key string) bool { return s.TTL(key) != -2*time.Millisecond }

// TestHandOffReleaseRetried: Unlock with a waiter of its own client
// queued (behind a waiter of another client, so not passed in-process)
// sends handoff.lua to every master; the calls that get no reply (three
// of five masters, each call not run) leave the releaser's keys there, and
// the head of the queue, the other client's waiter, cannot take a
// majority. Their release is tried again in the background, as a failed
// release's is: the keys go within a few node timeouts, and the head takes
// the lock then, not after the TTL. Found by the simulator (crowd seed
// 122, a latency spike during an Unlock: 687 ms with no holder and 33
// waiters).
func TestHandOffReleaseRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		servers, masters := memMasters(5)
		ctx := context.Background()
		drops := make([]atomic.Bool, 5)
		wrapped := append([]Master(nil), masters...)
		for i := 2; i < 5; i++ {
			drops[i].Store(true) // armed below
			wrapped[i] = noReplyOnce{full: masters[i].(full), dropped: &drops[i], script: fair.HandoffScript}
		}
		c := virtualClient(t, wrapped, WithFairness(3*time.Second))
		other := virtualClient(t, masters, WithFairness(3*time.Second))
		held, err := c.TryLock(ctx, "job", time.Minute)
		require.NoError(t, err)
		first := lockAsync(ctx, other, "job", time.Minute)
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		ours := lockAsync(ctx, c, "job", time.Minute)
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		for i := 2; i < 5; i++ {
			drops[i].Store(false)
		}
		start := time.Now()
		_ = held.Unlock(ctx)
		for i := 2; i < 5; i++ {
			require.True(t, drops[i].Load(), "the handoff call to master %d was not sent", i)
		}
		r := <-first
		require.NoError(t, r.err)
		assert.Less(t, r.at.Sub(start), time.Second, "the head waited for the releaser's keys to expire")
		time.Sleep(2 * c.cfg.nodeTimeout) // the retries of the other masters
		synctest.Wait()
		for i, s := range servers {
			v, _ := s.Get("lock:job")
			assert.NotEqual(t, held.Token(), v, "master %d still holds the releaser's key", i)
		}
		require.NoError(t, r.l.Unlock(ctx))
		r = <-ours
		require.NoError(t, r.err)
		require.NoError(t, r.l.Unlock(ctx))
	})
}

// TestHiddenHolderIsNoSplit: a TryLock that loses to a token on two
// masters of five, with two masters failing, may have lost to a holder
// (the failing masters may hold its token too): it returns ErrNotAcquired
// after its one round, not after the split vote's retries. Treated as a
// split, it made 6 rounds and took up to 0.84 s in the simulator.
func TestHiddenHolderIsNoSplit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		servers, masters := memMasters(5)
		var rounds atomic.Int32
		c := virtualClient(t, masters, WithHooks(Hooks{Attempt: func(context.Context, Event) { rounds.Add(1) }}))
		time.Sleep(time.Millisecond) // the warm-up
		for _, s := range servers[:2] {
			s.Set("lock:job", "another", time.Minute)
		}
		for _, s := range servers[3:] {
			s.Fail(errors.New("memredis: connection refused"))
		}
		_, err := c.TryLock(context.Background(), "job", time.Minute)
		require.ErrorIs(t, err, ErrNotAcquired)
		assert.Equal(t, int32(1), rounds.Load(), "a holder that may hold a majority was taken for a split vote")

		// Two tokens on two masters each, the fifth free: no token can
		// reach a majority, a split; the retries lose the same way, as
		// these keys stay.
		for _, s := range servers[2:4] {
			s.Fail(nil)
			s.Set("lock:job", "third", time.Minute)
		}
		servers[4].Fail(nil)
		for range 2 { // the failed masters' breakers close at a reply
			time.Sleep(time.Second)
			if l, err := c.TryLock(context.Background(), "other", time.Minute); err == nil {
				require.NoError(t, l.Unlock(context.Background()))
			}
		}
		rounds.Store(0)
		_, err = c.TryLock(context.Background(), "job", time.Minute)
		require.ErrorIs(t, err, ErrNotAcquired)
		assert.Equal(t, int32(1+splitRetries), rounds.Load(), "split votes were not tried again")
	})
}

// slowConn answers every SET NX and script late, by delay, as a master on
// a slow link would.
type slowConn struct {
	full
	delay time.Duration
}

func (s slowConn) SetNX(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	time.Sleep(s.delay)
	return s.full.SetNX(ctx, key, value, ttl)
}

func (s slowConn) Eval(ctx context.Context, sc *driver.Script, keys []string, args ...any) (any, error) {
	time.Sleep(s.delay)
	return s.full.Eval(ctx, sc, keys, args...)
}

// TestWrongTypeWithMasterDown: a waiting Lock, plain or fair, whose
// resource's key turns into a hash on four masters of five while the
// fifth is down (or hung) stops with ErrWrongType, not an outage retried
// until its context ends. The round is decided once a majority is out of
// reach (the down master and two wrong types); the wrong types of the two
// masters that answered after that were listed in its error but not
// counted, and two of five made it ErrQuorumUnavailable (found by the
// simulator's per-attempt check of "no false outage"). Only the fair
// waiter's round met it here (its script fails on a wrong type; a plain
// round's SET NX is refused, and the release that follows finds it); the
// plain and hung cases guard the rest.
func TestWrongTypeWithMasterDown(t *testing.T) {
	for _, fair := range []bool{false, true} {
		for _, hang := range []bool{false, true} {
			name := map[bool]string{false: "plain", true: "fair"}[fair] + map[bool]string{false: "/down", true: "/hung"}[hang]
			t.Run(name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					servers, masters := memMasters(5)
					var opts []Option
					if fair {
						opts = append(opts, WithFairness(time.Second))
					}
					holder := virtualClient(t, masters, opts...)
					// The waiter's link to two of the four is slow: they
					// answer after its rounds are decided.
					slow := slices.Clone(masters)
					for _, i := range []int{2, 3} {
						slow[i] = slowConn{masters[i].(full), 10 * time.Millisecond}
					}
					waiter := virtualClient(t, slow, opts...)
					_, err := holder.TryLock(context.Background(), "job", time.Second)
					require.NoError(t, err)
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					got := lockAsync(ctx, waiter, "job", time.Minute)
					time.Sleep(100 * time.Millisecond)
					synctest.Wait()
					eachMaster(t, masters[:4], hashScript, []string{"lock:job"})
					if hang {
						servers[4].Hang()
						defer servers[4].Resume()
					} else {
						servers[4].Fail(errors.New("connection refused"))
					}
					start := time.Now()
					r := <-got
					require.ErrorIs(t, r.err, ErrWrongType)
					assert.NotErrorIs(t, r.err, ErrQuorumUnavailable)
					assert.Less(t, r.at.Sub(start), 2*time.Second, "it stopped late")
					// The slow masters' calls of the waiter's leaving
					// finish before the bubble ends.
					time.Sleep(time.Second)
				})
			})
		}
	}
}

// TestProbedRoundOnSlowNetwork: a woken waiter whose every call takes 40
// ms (four fifths of the 50 ms node timeout) wins the released lock with
// its first attempt. Its round asks the probe master first and the others
// a quarter of the node timeout later; they had only the rest of one node
// timeout to answer, every round failed as an outage on all masters but
// the probe's, and the failures took the masters out of the client's
// breaker. The round now lasts that quarter longer.
func TestProbedRoundOnSlowNetwork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, masters := memMasters(5)
		holder := virtualClient(t, masters)
		slow := make([]Master, len(masters))
		for i, m := range masters {
			slow[i] = slowConn{m.(full), 40 * time.Millisecond}
		}
		var outages atomic.Int64
		waiter := virtualClient(t, slow, WithHooks(Hooks{Attempt: func(_ context.Context, e Event) {
			if errors.Is(e.Err, ErrQuorumUnavailable) {
				outages.Add(1)
			}
		}}))
		l, err := holder.TryLock(context.Background(), "job", time.Minute)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		got := lockAsync(ctx, waiter, "job", time.Minute)
		time.Sleep(time.Second)
		synctest.Wait()
		released := time.Now()
		require.NoError(t, l.Unlock(context.Background()))
		r := <-got
		require.NoError(t, r.err)
		assert.Less(t, r.at.Sub(released), 500*time.Millisecond, "the woken waiter won late")
		assert.Zero(t, outages.Load(), "attempts that failed as outages")
		require.NoError(t, r.l.Unlock(context.Background()))
	})
}

// TestTryLockFollowerTakesTimedOutOutcome: a TryLock that overlaps
// another of its client on the resource takes that attempt's outcome, also
// when the attempt failed on a timeout of its own (here the fence's mint,
// which hangs until the lock's validity runs out). Only a leader whose
// caller gave up leaves its followers to attempt again. The follower used
// to read context.DeadlineExceeded in the leader's error as its caller
// giving up and made a second attempt: two mints' wait in one TryLock (the
// simulator, seed 6359995783438721510), and in a crowd each follower in
// turn.
func TestTryLockFollowerTakesTimedOutOutcome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, masters := memMasters(3)
		minter := &countingMinter{delay: time.Hour} // no reply: the mint ends with the lock's validity
		c := virtualClient(t, masters, WithFence(minter))
		ctx := context.Background()
		start := time.Now()
		var errs [3]error
		var took [3]time.Duration
		var wg sync.WaitGroup
		for i := range 3 {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * time.Millisecond) // the first leads; the others follow
				_, errs[i] = c.TryLock(ctx, "job", time.Second)
				took[i] = time.Since(start)
			})
		}
		wg.Wait()
		for i, err := range errs {
			assert.ErrorIs(t, err, ErrFenceUnavailable, "call %d", i)
		}
		assert.EqualValues(t, 1, minter.calls.Load(), "one attempt, one mint, shared by the three calls")
		assert.Equal(t, took[0], took[2], "the last follower returned when the attempt it followed did")
	})
}

// TestTryLockFollowerOfQuitLeaderAttempts: a follower whose leader's caller
// gave up mid-attempt makes an attempt of its own (and wins the free key).
func TestTryLockFollowerOfQuitLeaderAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, masters := memMasters(3)
		minter := &countingMinter{delay: 10 * time.Millisecond}
		c := virtualClient(t, masters, WithFence(minter))
		lctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond) // ends in the leader's mint
		defer cancel()
		lead := make(chan error, 1)
		go func() {
			_, err := c.TryLock(lctx, "job", time.Second)
			lead <- err
		}()
		time.Sleep(time.Millisecond)
		l, err := c.TryLock(context.Background(), "job", time.Second)
		require.NoError(t, err, "the follower attempts when its leader's caller gave up")
		assert.ErrorIs(t, <-lead, context.DeadlineExceeded)
		assert.EqualValues(t, 2, minter.calls.Load())
		require.NoError(t, l.Unlock(context.Background()))
	})
}
