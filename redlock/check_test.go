package redlock

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/fence"
	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
	"quorumlock.dev/redlock/check"

	"quorumlock.dev/driver/goredis"
)

// The rules a node is judged by are package check's and tested there;
// these tests cover what the Client adds: its masters in order, its fence
// counter's node, its node timeout, and the strict gate.

// checkTimeout is the node timeout of these tests: generous, since they run
// under -race on a shared machine and assert no speed.
const checkTimeout = 2 * time.Second

func startMaster(t *testing.T, args ...string) (*redisserver.Server, *redis.Client) {
	t.Helper()
	s := redistest.Start(t, redisserver.Options{Args: args})
	return s, newClient(t, s.Addr())
}

// TestCheckMasters: one report per master, in New's order, named by place
// and address; no fence report without a fence.
func TestCheckMasters(t *testing.T) {
	t.Parallel()
	s0, m0 := startMaster(t)
	s1, m1 := startMaster(t, "--maxmemory-policy", "allkeys-lru")
	c := newTestClient(t, conns(m0, m1), WithNodeTimeout(checkTimeout))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	rep, err := c.Check(ctx)
	require.NoError(t, err)
	require.Len(t, rep.Masters, 2)
	assert.Equal(t, "master 0", rep.Masters[0].Node)
	assert.Equal(t, s0.Addr(), rep.Masters[0].Addr)
	assert.Equal(t, "master 1", rep.Masters[1].Node)
	assert.Equal(t, s1.Addr(), rep.Masters[1].Addr)
	assert.Nil(t, rep.Fence, "no fence counter")
	err = rep.Err()
	require.ErrorIs(t, err, check.ErrUnsafe, "redlock's sentinel is the report's")
	assert.Contains(t, err.Error(), "master 1")
	assert.NotContains(t, err.Error(), "master 0")
}

// TestCheckFenceCounter: a minter that names its node ([NodeMinter]) has
// that node checked by the counter's rules.
func TestCheckFenceCounter(t *testing.T) {
	t.Parallel()
	_, m := startMaster(t)
	_, weak := startMaster(t, "--appendonly", "yes", "--appendfsync", "everysec")
	counter, err := fence.NewRedisCounter(goredis.Conn(weak))
	require.NoError(t, err)
	c := newTestClient(t, conns(m), WithNodeTimeout(checkTimeout), WithFence(counter))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	rep, err := c.Check(ctx)
	require.NoError(t, err)
	require.NotNil(t, rep.Fence)
	assert.Equal(t, "fence counter", rep.Fence.Node)
	require.ErrorIs(t, rep.Err(), check.ErrUnsafe, "appendfsync everysec repeats fences")
	assert.Contains(t, rep.Err().Error(), "fence counter")
}

func TestCheckContext(t *testing.T) {
	t.Parallel()
	_, m := startMaster(t)
	c := newTestClient(t, conns(m))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := c.Check(ctx)
	assert.ErrorIs(t, err, context.Canceled)
}

func TestStrictCheck(t *testing.T) {
	t.Parallel()
	_, good := startMaster(t)
	_, bad := startMaster(t, "--maxmemory-policy", "volatile-lru")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	lax := newTestClient(t, conns(good, bad), WithNodeTimeout(checkTimeout))
	assert.NoError(t, lax.admit(ctx), "without WithStrictCheck nothing is checked")

	strict := newTestClient(t, conns(good, bad), WithNodeTimeout(checkTimeout), WithStrictCheck())
	err := strict.admit(ctx)
	require.ErrorIs(t, err, check.ErrUnsafe)
	assert.Contains(t, err.Error(), "volatile-lru")
	assert.True(t, strict.cfg.gate.done, "every node answered: the outcome is kept")
	require.ErrorIs(t, strict.admit(ctx), check.ErrUnsafe, "and given again")

	fine := newTestClient(t, conns(good), WithNodeTimeout(checkTimeout), WithStrictCheck())
	assert.NoError(t, fine.admit(ctx))

	// Every acquisition passes the gate.
	_, err = strict.TryLock(ctx, resourceName(t), 10*time.Second)
	require.ErrorIs(t, err, check.ErrUnsafe)
	_, err = strict.TryLockAll(ctx, []string{resourceName(t), resourceName(t)}, 10*time.Second)
	require.ErrorIs(t, err, check.ErrUnsafe)
	l, err := fine.TryLock(ctx, resourceName(t), 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))

	// One Option value shared by two clients must not share their outcome.
	opt := WithStrictCheck()
	a := newTestClient(t, conns(bad), WithNodeTimeout(checkTimeout), opt)
	b := newTestClient(t, conns(good), WithNodeTimeout(checkTimeout), opt)
	require.ErrorIs(t, a.admit(ctx), check.ErrUnsafe)
	assert.NoError(t, b.admit(ctx))
}

// TestStrictCheckUnreachable: a master that is down is a warning, so a
// strict client still locks on the masters that are up, but the check is
// incomplete: its outcome is not kept for good.
func TestStrictCheckUnreachable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	_, up := startMaster(t)
	c := newTestClient(t, conns(up, newClient(t, addr)), WithNodeTimeout(checkTimeout), WithStrictCheck())
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.NoError(t, c.admit(ctx))
	c.cfg.gate.mu.Lock()
	defer c.cfg.gate.mu.Unlock()
	assert.False(t, c.cfg.gate.done, "a node did not answer: the check runs again")
	assert.False(t, c.cfg.gate.last.IsZero())
}
