package redlock

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/driver/goredis"
	"quorumlock.dev/fence"
	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
	"quorumlock.dev/redlock/check"
	"quorumlock.dev/redlock/internal/push"
)

// lockerACL is the ACL SETUSER line that docs/operations.md ("Who may see a
// lock") gives for the lock clients' user, read from the page so that the
// page and this test cannot drift apart, with password pw.
func lockerACL(t *testing.T, pw string) []any {
	t.Helper()
	doc, err := os.ReadFile("../docs/operations.md")
	require.NoError(t, err)
	for line := range strings.Lines(string(doc)) {
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, "ACL SETUSER locker "); ok {
			args := []any{"acl", "setuser", "locker"}
			for _, f := range strings.Fields(strings.ReplaceAll(rest, "CHANGE-ME", pw)) {
				args = append(args, f)
			}
			return args
		}
	}
	t.Fatal("docs/operations.md gives no ACL SETUSER locker line")
	return nil
}

// TestACLKeepsOthersOff: with the documented ACL user, a fair, fenced client
// does everything it does with full rights (acquire, wait with push wake-up,
// hand over between waiters, mint, Inspect, Release, Check), and a user kept
// to other keys and channels can neither read a lock's token, nor run the
// release on it, nor subscribe to the channels that carry tokens.
func TestACLKeepsOthersOff(t *testing.T) {
	servers := redistest.StartN(t, 4, redisserver.Options{}) // three masters and the counter node
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	as := func(addr, user, pw string) *redis.Client {
		o := redistest.Options(addr)
		o.Username, o.Password = user, pw
		c := redis.NewClient(o)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	var masters []Master
	var others []*redis.Client
	var counterNode *redis.Client
	for i, s := range servers {
		admin := redistest.Client(t, s.Addr())
		require.NoError(t, admin.Do(ctx, lockerACL(t, "locker-pw")...).Err())
		require.NoError(t, admin.Do(ctx, "acl", "setuser", "other", "on", ">other-pw", "~app:*", "&app:*", "+@all").Err())
		others = append(others, as(s.Addr(), "other", "other-pw"))
		if i == 3 {
			counterNode = as(s.Addr(), "locker", "locker-pw")
			continue
		}
		masters = append(masters, goredis.Conn(as(s.Addr(), "locker", "locker-pw")))
	}
	counter, err := fence.NewRedisCounter(goredis.Conn(counterNode))
	require.NoError(t, err)
	c := newTestClient(t, masters, WithFairness(time.Second), WithFence(counter))
	t.Cleanup(func() { _ = c.Close() })
	res := resourceName(t)

	holder, err := c.TryLock(ctx, res, 30*time.Second)
	require.NoError(t, err)
	waiting := lockAsync(ctx, c, res, time.Minute) // twice the holder's TTL: handed over by a round
	require.Eventually(t, func() bool {
		in, err := c.Inspect(ctx, res)
		if err != nil {
			return false
		}
		for _, m := range in.Masters {
			if m.Queued != 1 {
				return false
			}
		}
		return true
	}, 10*time.Second, 5*time.Millisecond, "the waiter did not queue on every master")
	require.NoError(t, holder.Unlock(ctx))
	w := <-waiting
	require.NoError(t, w.err)
	assert.EqualValues(t, 1, fairOf(c).Handed(), "not handed over by the release")
	first, _ := holder.Fence()
	next, ok := w.l.Fence()
	require.True(t, ok)
	assert.Greater(t, next, first)

	in, err := c.Inspect(ctx, res)
	require.NoError(t, err)
	assert.Equal(t, w.l.Token(), in.Holder)
	assert.True(t, in.FenceKnown)
	assert.Equal(t, next, in.Fence)

	key := "lock:" + res
	for _, o := range others[:3] {
		_, err := o.Get(ctx, key).Result()
		assert.ErrorContains(t, err, "NOPERM", "another user read the token")
		err = o.Eval(ctx, releaseScript.Source(), []string{key}, w.l.Token()).Err()
		assert.ErrorContains(t, err, "NOPERM", "another user ran the release")
		for _, ch := range []string{key, "lockp:0123abcd:" + key, push.HandedChannel(key)} {
			sub := o.Subscribe(ctx, ch)
			_, err = sub.Receive(ctx)
			assert.ErrorContains(t, err, "NOPERM", "another user subscribed to %s", ch)
			_ = sub.Close()
		}
	}
	in, err = c.Inspect(ctx, res)
	require.NoError(t, err)
	for _, m := range in.Masters {
		assert.Equal(t, w.l.Token(), m.Token, "%s: the lock's key changed", m.Addr)
	}

	n, err := c.Release(ctx, res, w.l.Token())
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	rep, err := c.Check(ctx)
	require.NoError(t, err)
	for _, node := range append(rep.Masters, *rep.Fence) {
		for _, f := range node.Findings {
			assert.NotEqual(t, check.Unknown, f.Status, "%s: %s could not be read with the documented ACL: %s", node.Node, f.Setting, f.Why)
		}
	}

	// A client without fairness subscribes to the key's channel and to
	// the one where handoffs to another client's claim are told
	// (push.HandedChannel) in one SUBSCRIBE: the ACL must allow both, or
	// its waiter hears no release and polls (at 20 s here, so that only a
	// release heard can wake it in time).
	plainHolder, plainWaiter := newTestClient(t, masters), newTestClient(t, masters, WithRetry(0, 20*time.Second, 0))
	t.Cleanup(func() { _ = plainHolder.Close(); _ = plainWaiter.Close() })
	h, err := plainHolder.TryLock(ctx, res, time.Minute)
	require.NoError(t, err)
	waiting = lockAsync(ctx, plainWaiter, res, time.Minute)
	require.Eventually(t, func() bool { return sleepsOn(plainWaiter, res, h.Token()) }, 10*time.Second, time.Millisecond,
		"the plain waiter does not sleep on the holder's token")
	require.Eventually(t, func() bool {
		var waiters []*push.Waiter // asked outside Waiting, which holds the subscriptions' locks
		plainWaiter.push.Waiting("lock:"+res, func(ws []*push.Waiter) { waiters = append(waiters, ws...) })
		for _, w := range waiters {
			if w.ListeningAt(0) && w.ListeningAt(1) && w.ListeningAt(2) {
				return true
			}
		}
		return false
	}, 10*time.Second, time.Millisecond, "the plain waiter's SUBSCRIBE was refused with the documented ACL")
	require.NoError(t, h.Unlock(ctx))
	released := time.Now()
	w = <-waiting
	require.NoError(t, w.err)
	assert.Less(t, w.at.Sub(released), 5*time.Second, "the plain waiter was not woken by the release (its poll is 20 s, the lock's TTL a minute)")
	require.NoError(t, w.l.Unlock(ctx))
}
