package redlock

import (
	"context"
	"encoding/json"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/fence"
	"quorumlock.dev/internal/redisserver"
	"quorumlock.dev/internal/redistest"

	"quorumlock.dev/driver/goredis"
)

// checkTimeout is the node timeout of these tests: generous, since they run
// under -race on a shared machine and assert no speed.
const checkTimeout = 2 * time.Second

func startMaster(t *testing.T, args ...string) (*redisserver.Server, *redis.Client) {
	t.Helper()
	s := redistest.Start(t, redisserver.Options{Args: args})
	return s, newClient(t, s.Addr())
}

func checkOf(t *testing.T, masters []Master, opts ...Option) Report {
	t.Helper()
	c := newTestClient(t, masters, append([]Option{WithNodeTimeout(checkTimeout)}, opts...)...)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	rep, err := c.Check(ctx)
	require.NoError(t, err)
	require.Len(t, rep.Masters, len(masters))
	return rep
}

// statuses maps each setting of n to its status.
func statuses(n NodeReport) map[string]Status {
	m := make(map[string]Status, len(n.Findings))
	for _, f := range n.Findings {
		m[f.Setting] = f.Status
	}
	return m
}

func value(n NodeReport, setting string) string {
	for _, f := range n.Findings {
		if f.Setting == setting {
			return f.Value
		}
	}
	return "(absent)"
}

func TestCheckDefaultServer(t *testing.T) {
	t.Parallel()
	s, m := startMaster(t) // redisserver's defaults: no persistence
	rep := checkOf(t, conns(m))
	n := rep.Masters[0]
	assert.Equal(t, "master 0", n.Node)
	assert.Equal(t, s.Addr(), n.Addr)
	assert.Equal(t, map[string]Status{
		"redis_version": OK, "role": OK, "maxmemory-policy": OK,
		"appendonly": Warning, "appendfsync": OK, "save": Warning,
		"ContextTimeoutEnabled": Warning, "PoolSize": OK, "MaxRetries": OK,
	}, statuses(n))
	assert.Equal(t, "noeviction", value(n, "maxmemory-policy"))
	assert.Equal(t, "no", value(n, "appendonly"))
	assert.Equal(t, "0", value(n, "MaxRetries"), "MaxRetries -1 is normalised to 0 by go-redis")
	assert.Nil(t, rep.Fence, "no fence counter")
	assert.Equal(t, Warning, rep.Worst())
	assert.NoError(t, rep.Err())
}

func TestCheckEvictionIsAProblem(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"allkeys-lru", "volatile-ttl"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			_, good := startMaster(t)
			_, bad := startMaster(t, "--maxmemory-policy", policy)
			rep := checkOf(t, conns(good, bad))
			assert.Equal(t, OK, statuses(rep.Masters[0])["maxmemory-policy"])
			assert.Equal(t, Problem, statuses(rep.Masters[1])["maxmemory-policy"])
			assert.Equal(t, policy, value(rep.Masters[1], "maxmemory-policy"))
			assert.Equal(t, Problem, rep.Worst())
			err := rep.Err()
			require.ErrorIs(t, err, ErrUnsafeConfig)
			assert.Contains(t, err.Error(), "master 1")
			assert.Contains(t, err.Error(), policy)
		})
	}
}

func TestCheckPersistence(t *testing.T) {
	t.Parallel()
	_, always := startMaster(t, "--appendonly", "yes", "--appendfsync", "always")
	_, everysec := startMaster(t, "--appendonly", "yes", "--appendfsync", "everysec")
	_, snap := startMaster(t, "--save", "60 1")
	rep := checkOf(t, conns(always, everysec, snap))
	assert.Equal(t, OK, statuses(rep.Masters[0])["appendonly"])
	assert.Equal(t, OK, statuses(rep.Masters[0])["appendfsync"])
	assert.Equal(t, OK, statuses(rep.Masters[0])["save"])
	assert.Equal(t, Warning, statuses(rep.Masters[1])["appendfsync"])
	assert.Equal(t, "everysec", value(rep.Masters[1], "appendfsync"))
	assert.Equal(t, Warning, statuses(rep.Masters[2])["save"])
	assert.Equal(t, "60 1", value(rep.Masters[2], "save"))
	assert.NoError(t, rep.Err(), "weak persistence is a warning on a master")
}

// TestCheckConfigDisabled: a managed Redis often refuses CONFIG. What INFO
// shows is still judged; the rest is unknown, and nothing fails.
func TestCheckConfigDisabled(t *testing.T) {
	t.Parallel()
	_, m := startMaster(t, "--rename-command", "CONFIG", "", "--maxmemory-policy", "allkeys-lru")
	require.Error(t, m.ConfigGet(t.Context(), "save").Err(), "CONFIG is disabled")
	rep := checkOf(t, conns(m))
	st := statuses(rep.Masters[0])
	assert.Equal(t, Unknown, st["appendfsync"])
	assert.Equal(t, Unknown, st["save"])
	assert.Equal(t, OK, st["role"])
	assert.Equal(t, Warning, st["appendonly"], "read from INFO's aof_enabled")
	assert.Equal(t, "no", value(rep.Masters[0], "appendonly"))
	assert.Equal(t, Problem, st["maxmemory-policy"], "read from INFO's maxmemory_policy")
}

func TestCheckReplicaIsAProblem(t *testing.T) {
	t.Parallel()
	primary, _ := startMaster(t)
	_, replica := startMaster(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port()))
	rep := checkOf(t, conns(replica))
	assert.Equal(t, Problem, statuses(rep.Masters[0])["role"])
	assert.Equal(t, "slave", value(rep.Masters[0], "role"))
	require.ErrorIs(t, rep.Err(), ErrUnsafeConfig)
}

// TestCheckUnreachable: a master that is down has its settings unknown and
// a reachable warning, not an error (nor a Problem, which would stop a
// strict client from locking on the masters that are up), and Check still
// returns within its bounds.
func TestCheckUnreachable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	_, up := startMaster(t)
	rep := checkOf(t, conns(up, newClient(t, addr)))
	for setting, st := range statuses(rep.Masters[1]) {
		switch setting {
		case "ContextTimeoutEnabled", "PoolSize", "MaxRetries":
		case "reachable":
			assert.Equal(t, Warning, st, setting)
		default:
			assert.Equal(t, Unknown, st, setting)
		}
	}
	assert.False(t, rep.Masters[1].Reachable())
	assert.True(t, rep.Masters[0].Reachable())
	assert.Equal(t, OK, statuses(rep.Masters[0])["role"])
	assert.NoError(t, rep.Err())
	assert.False(t, complete(rep))
}

func TestCheckFenceCounter(t *testing.T) {
	t.Parallel()
	_, m := startMaster(t)
	_, durable := startMaster(t, "--appendonly", "yes", "--appendfsync", "always")
	_, weak := startMaster(t, "--appendonly", "yes", "--appendfsync", "everysec")
	for _, tc := range []struct {
		name string
		node *redis.Client
		want Status
	}{
		{"durable", durable, OK},
		{"everysec", weak, Problem},
	} {
		counter, err := fence.NewRedisCounter(goredis.Conn(tc.node))
		require.NoError(t, err)
		rep := checkOf(t, conns(m), WithFence(counter))
		require.NotNil(t, rep.Fence, tc.name)
		assert.Equal(t, "fence counter", rep.Fence.Node)
		st := statuses(*rep.Fence)
		assert.Equal(t, tc.want, st["appendfsync"], tc.name)
		assert.Equal(t, OK, st["appendonly"], tc.name)
		assert.Equal(t, OK, st["no-appendfsync-on-rewrite"], tc.name)
		if tc.want == Problem {
			require.ErrorIs(t, rep.Err(), ErrUnsafeConfig)
			assert.Contains(t, rep.Err().Error(), "fence counter")
		} else {
			assert.NoError(t, rep.Err())
		}
	}
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
	require.ErrorIs(t, err, ErrUnsafeConfig)
	assert.Contains(t, err.Error(), "volatile-lru")
	assert.True(t, strict.cfg.gate.done, "every node answered: the outcome is kept")
	require.ErrorIs(t, strict.admit(ctx), ErrUnsafeConfig, "and given again")

	fine := newTestClient(t, conns(good), WithNodeTimeout(checkTimeout), WithStrictCheck())
	assert.NoError(t, fine.admit(ctx))

	// Every acquisition passes the gate.
	_, err = strict.TryLock(ctx, resourceName(t), 10*time.Second)
	require.ErrorIs(t, err, ErrUnsafeConfig)
	_, err = strict.TryLockAll(ctx, []string{resourceName(t), resourceName(t)}, 10*time.Second)
	require.ErrorIs(t, err, ErrUnsafeConfig)
	l, err := fine.TryLock(ctx, resourceName(t), 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))

	// One Option value shared by two clients must not share their outcome.
	opt := WithStrictCheck()
	a := newTestClient(t, conns(bad), WithNodeTimeout(checkTimeout), opt)
	b := newTestClient(t, conns(good), WithNodeTimeout(checkTimeout), opt)
	require.ErrorIs(t, a.admit(ctx), ErrUnsafeConfig)
	assert.NoError(t, b.admit(ctx))
}

func TestStatusJSON(t *testing.T) {
	b, err := json.Marshal(Report{Masters: []NodeReport{{Node: "master 0", Findings: []Finding{
		{Setting: "role", Source: "server", Value: "master", Status: OK},
		{Setting: "save", Source: "server", Status: Unknown},
		{Setting: "appendonly", Source: "server", Value: "no", Status: Warning},
		{Setting: "maxmemory-policy", Source: "server", Value: "allkeys-lru", Status: Problem},
	}}}})
	require.NoError(t, err)
	for _, s := range []string{`"status":"ok"`, `"status":"unknown"`, `"status":"warning"`, `"status":"problem"`} {
		assert.Contains(t, string(b), s)
	}
	assert.NotContains(t, string(b), `"fence"`)
	assert.Equal(t, "status(9)", Status(9).String())
}
