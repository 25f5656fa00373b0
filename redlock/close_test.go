package redlock

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/driver/goredis"
)

// TestCloseWakesWaiters: a waiter that sleeps on the holder's TTL, its
// release to be pushed, is woken by Close and polls from then on: it takes
// the lock within a few retry delays of the release, not at the holder's
// expiry.
func TestCloseWakesWaiters(t *testing.T) {
	masters, admin := waitMasters(t, 3)
	res := resourceName(t)
	holderClient := newTestClient(t, masters, WithNodeTimeout(250*time.Millisecond))
	c := newTestClient(t, masters, WithNodeTimeout(250*time.Millisecond), WithRetry(0, 20*time.Millisecond, 0))
	t.Cleanup(func() { _ = holderClient.Close(); _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	holder := heldFor(ctx, t, holderClient, admin, res) // a minute

	waiting := lockAsync(ctx, c, res, time.Minute)
	subscribed(t, admin, res)
	require.Eventually(t, func() bool { return sleepsOn(c, res, holder.Token()) }, 5*time.Second, time.Millisecond,
		"the waiter does not sleep on the holder's release")
	require.NoError(t, c.Close())
	time.Sleep(100 * time.Millisecond) // the woken waiter tries, loses, and polls
	released := time.Now()
	require.NoError(t, holder.Unlock(ctx))
	select {
	case w := <-waiting:
		require.NoError(t, w.err)
		t.Logf("taken %v after the release", w.at.Sub(released))
		require.NoError(t, w.l.Unlock(ctx))
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter of a closed client still sleeps 10 s after the release (the holder's key had a minute)")
	}
}

// hungServer accepts connections and never answers: a master that hangs.
func hungServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = conn.Close() })
		}
	}()
	return ln.Addr().String()
}

// TestCloseBoundedOnHungMaster: with the restart guard and the clock
// monitor on, a master that never answers (a go-redis client with no read
// timeout: its INFO, and its subscription's handshake, wait for ever) and a
// Lock waiting with push, Close returns (within about a node timeout).
func TestCloseBoundedOnHungMaster(t *testing.T) {
	masters, admin := waitMasters(t, 2)
	hung := redis.NewClient(&redis.Options{Addr: hungServer(t), ReadTimeout: -1, WriteTimeout: -1, MaxRetries: -1})
	t.Cleanup(func() { _ = hung.Close() })
	const nodeTimeout = 100 * time.Millisecond
	all := append(masters, goredis.Conn(hung))
	c, err := New(all, WithNodeTimeout(nodeTimeout),
		WithRestartGuard(nodeTimeout), WithClockMonitor(nodeTimeout, true))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return c.watcher.Progress(2).Sampling }, 5*time.Second, time.Millisecond,
		"no sample of the hung master in flight")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res := resourceName(t)
	for _, a := range admin {
		require.NoError(t, a.Set(ctx, "lock:"+res, "another-holder", time.Minute).Err())
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	waiting := lockAsync(wctx, c, res, time.Second)
	subscribed(t, admin, res)
	time.Sleep(3 * nodeTimeout) // well past the sample's own node timeout
	closed := make(chan struct{})
	start := time.Now()
	go func() {
		_ = c.Close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Logf("Close took %v", time.Since(start))
	case <-time.After(10 * time.Second):
		t.Fatal("Close still waits for the hung master's INFO after 10 s")
	}
	for i := range 2 {
		assert.False(t, c.watcher.Quarantined(i), "master %d out after Close", i)
	}
	wcancel()
	assert.ErrorIs(t, (<-waiting).err, context.Canceled)
}

// TestClientGoroutines: what New's doc says a Client runs: the watcher's
// goroutine (and a sample per master at most), two per master once a Lock
// has waited, one per renewer; Close ends all but the renewers. Counted by
// the client's (or the lock's) address in the goroutines' stacks.
func TestClientGoroutines(t *testing.T) {
	masters, admin := waitMasters(t, 3)
	c, err := New(masters, WithNodeTimeout(250*time.Millisecond), WithClockMonitor(time.Hour, false)) // the watcher, with no quarantine of these young servers
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clockSampled(t, c, 1) // the first samples have begun, and ended on every master
	require.Eventually(t, func() bool { return running(c.watcher, "watch.(*Watcher).sample") == 0 }, 5*time.Second, time.Millisecond,
		"the first samples did not end")
	assert.Equal(t, 1, running(c.watcher, "watch.(*Watcher).run("), "watchers")
	assert.Zero(t, running(c.push, "push.(*subscriber)."), "subscriptions before any wait")

	res := resourceName(t)
	holder := heldFor(ctx, t, c, admin, res)
	require.NoError(t, holder.Renew(time.Minute, time.Hour))
	// A goroutine that has not run yet shows no arguments in its stack.
	assert.Eventually(t, func() bool { return running(holder, "redlock.(*Lock).renew") == 1 }, 5*time.Second, time.Millisecond,
		"renewers: want 1")
	waiting := lockAsync(ctx, c, res, time.Minute)
	subscribed(t, admin, res)
	assert.Equal(t, 2*len(masters), running(c.push, "push.(*subscriber)."), "subscription goroutines")

	require.NoError(t, c.Close())
	assert.Zero(t, running(c.watcher, "watch.(*Watcher).run("), "the watcher outlived Close")
	// Close waits for them a node timeout at most; on a loaded machine one
	// may end a moment later, on its own.
	assert.Eventually(t, func() bool { return running(c.push, "push.(*subscriber).") == 0 }, 5*time.Second, time.Millisecond,
		"subscriptions outlived Close by seconds")
	assert.Equal(t, 1, running(holder, "redlock.(*Lock).renew"), "Close ended a renewer")
	holder.Progress()
	require.NoError(t, holder.Unlock(ctx))
	assert.Zero(t, running(holder, "redlock.(*Lock).renew"), "the renewer outlived Unlock")
	w := <-waiting
	require.NoError(t, w.err)
	require.NoError(t, w.l.Unlock(ctx))
}

// running counts the goroutines that run one of fns on of, a *Client, a
// *Lock or a *watch.Watcher: its address is among the arguments in the
// goroutine's stack. All of the process's goroutines but of's are left
// out, whatever other tests left running.
func running(of any, fns ...string) int {
	ptr := fmt.Sprintf("%p", of)
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if !strings.Contains(g, ptr) {
			continue
		}
		for _, fn := range fns {
			if strings.Contains(g, fn) {
				n++
				break
			}
		}
	}
	return n
}
