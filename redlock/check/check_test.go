package check

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/driver"
	"quorumlock.dev/driver/goredis"
	"quorumlock.dev/internal/harness/memredis"
	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
)

// timeout bounds each call of these tests: generous, since they run under
// -race on a shared machine and assert no speed.
const timeout = 2 * time.Second

func startNode(t *testing.T, args ...string) (*redisserver.Server, *redis.Client) {
	t.Helper()
	s := redistest.Start(t, redisserver.Options{Args: args})
	return s, redistest.Client(t, s.Addr())
}

// nodes checks masters (go-redis clients) and fence (nil for none).
func nodes(t *testing.T, masters []*redis.Client, fence *redis.Client) Report {
	t.Helper()
	conns := make([]driver.Conn, len(masters))
	for i, m := range masters {
		conns[i] = goredis.Conn(m)
	}
	var f driver.Conn
	if fence != nil {
		f = goredis.Conn(fence)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	rep, err := Nodes(ctx, timeout, conns, f)
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

func TestDefaultServer(t *testing.T) {
	t.Parallel()
	s, m := startNode(t) // redisserver's defaults: no persistence
	rep := nodes(t, []*redis.Client{m}, nil)
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

func TestEvictionIsAProblem(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"allkeys-lru", "volatile-ttl"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			_, good := startNode(t)
			_, bad := startNode(t, "--maxmemory-policy", policy)
			rep := nodes(t, []*redis.Client{good, bad}, nil)
			assert.Equal(t, OK, statuses(rep.Masters[0])["maxmemory-policy"])
			assert.Equal(t, Problem, statuses(rep.Masters[1])["maxmemory-policy"])
			assert.Equal(t, policy, value(rep.Masters[1], "maxmemory-policy"))
			assert.Equal(t, Problem, rep.Worst())
			err := rep.Err()
			require.ErrorIs(t, err, ErrUnsafe)
			assert.Contains(t, err.Error(), "master 1")
			assert.Contains(t, err.Error(), policy)
		})
	}
}

func TestPersistence(t *testing.T) {
	t.Parallel()
	_, always := startNode(t, "--appendonly", "yes", "--appendfsync", "always")
	_, everysec := startNode(t, "--appendonly", "yes", "--appendfsync", "everysec")
	_, snap := startNode(t, "--save", "60 1")
	rep := nodes(t, []*redis.Client{always, everysec, snap}, nil)
	assert.Equal(t, OK, statuses(rep.Masters[0])["appendonly"])
	assert.Equal(t, OK, statuses(rep.Masters[0])["appendfsync"])
	assert.Equal(t, OK, statuses(rep.Masters[0])["save"])
	assert.Equal(t, Warning, statuses(rep.Masters[1])["appendfsync"])
	assert.Equal(t, "everysec", value(rep.Masters[1], "appendfsync"))
	assert.Equal(t, Warning, statuses(rep.Masters[2])["save"])
	assert.Equal(t, "60 1", value(rep.Masters[2], "save"))
	assert.NoError(t, rep.Err(), "weak persistence is a warning on a master")
}

// TestConfigDisabled: a managed Redis often refuses CONFIG. What INFO
// shows is still judged; the rest is unknown, and nothing fails.
func TestConfigDisabled(t *testing.T) {
	t.Parallel()
	_, m := startNode(t, "--rename-command", "CONFIG", "", "--maxmemory-policy", "allkeys-lru")
	require.Error(t, m.ConfigGet(t.Context(), "save").Err(), "CONFIG is disabled")
	rep := nodes(t, []*redis.Client{m}, nil)
	st := statuses(rep.Masters[0])
	assert.Equal(t, Unknown, st["appendfsync"])
	assert.Equal(t, Unknown, st["save"])
	assert.Equal(t, OK, st["role"])
	assert.Equal(t, Warning, st["appendonly"], "read from INFO's aof_enabled")
	assert.Equal(t, "no", value(rep.Masters[0], "appendonly"))
	assert.Equal(t, Problem, st["maxmemory-policy"], "read from INFO's maxmemory_policy")
}

func TestReplicaIsAProblem(t *testing.T) {
	t.Parallel()
	primary, _ := startNode(t)
	_, replica := startNode(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port()))
	rep := nodes(t, []*redis.Client{replica}, nil)
	assert.Equal(t, Problem, statuses(rep.Masters[0])["role"])
	assert.Equal(t, "slave", value(rep.Masters[0], "role"))
	require.ErrorIs(t, rep.Err(), ErrUnsafe)
}

// TestUnreachable: a master that is down has its settings unknown and a
// reachable warning, not an error (nor a Problem, which would stop a
// strict client from locking on the masters that are up), and Nodes still
// returns within its bounds.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	_, up := startNode(t)
	rep := nodes(t, []*redis.Client{up, redistest.Client(t, addr)}, nil)
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
}

// TestFenceCounter: the counter's node is judged by stricter rules than a
// master's. What can bring a counter back older than the fences handed out
// is a problem (appendfsync everysec, snapshots only); no persistence at
// all brings it back empty, and its counters restart from the node's clock
// above every earlier fence (fence's TestCounterNodeRestartedEmpty): a
// warning. Only full durability is OK.
func TestFenceCounter(t *testing.T) {
	t.Parallel()
	_, m := startNode(t)
	_, durable := startNode(t, "--appendonly", "yes", "--appendfsync", "always")
	_, weak := startNode(t, "--appendonly", "yes", "--appendfsync", "everysec")
	_, none := startNode(t, "--save", "")
	_, snapshots := startNode(t, "--save", "60 1")
	for _, tc := range []struct {
		name              string
		node              *redis.Client
		appendonly, fsync Status
		worstIsProblem    bool
	}{
		{"durable", durable, OK, OK, false},
		{"everysec", weak, OK, Problem, true},
		{"no persistence", none, Warning, OK, false},
		{"snapshots only", snapshots, Problem, OK, true},
	} {
		rep := nodes(t, []*redis.Client{m}, tc.node)
		require.NotNil(t, rep.Fence, tc.name)
		assert.Equal(t, "fence counter", rep.Fence.Node)
		st := statuses(*rep.Fence)
		assert.Equal(t, tc.appendonly, st["appendonly"], tc.name)
		assert.Equal(t, tc.fsync, st["appendfsync"], tc.name)
		assert.Equal(t, OK, st["no-appendfsync-on-rewrite"], tc.name)
		if tc.worstIsProblem {
			require.ErrorIs(t, rep.Err(), ErrUnsafe, tc.name)
			assert.Contains(t, rep.Err().Error(), "fence counter")
		} else {
			assert.NoError(t, rep.Err(), tc.name)
		}
	}
}

// bare is a Conn with none of the optional capabilities.
type bare struct{ driver.Conn }

// TestWithoutCapabilities: a driver that cannot subscribe, inspect or
// describe is reported, not skipped: every such gap is a finding.
func TestWithoutCapabilities(t *testing.T) {
	t.Parallel()
	full := memredis.New().Conn()
	rep, err := Nodes(t.Context(), timeout, []driver.Conn{full, bare{full}}, bare{full})
	require.NoError(t, err)

	st := statuses(rep.Masters[0])
	assert.Equal(t, OK, st["role"], "memredis reads as a durable primary")
	assert.NotContains(t, st, "push wake-up", "a driver that can subscribe")
	assert.NotContains(t, st, "settings")

	for _, n := range []NodeReport{rep.Masters[1], *rep.Fence} {
		st := statuses(n)
		assert.Equal(t, Unknown, st["settings"], n.Node)
		assert.Equal(t, Unknown, st["options"], n.Node)
		assert.Equal(t, Unknown, st["role"], n.Node)
		assert.Empty(t, n.Addr, n.Node)
	}
	assert.Equal(t, Warning, statuses(rep.Masters[1])["push wake-up"])
	assert.Equal(t, "no", value(rep.Masters[1], "push wake-up"))
	assert.NotContains(t, statuses(*rep.Fence), "push wake-up", "the fence counter does not wake waiters")
	assert.NoError(t, rep.Err(), "unknown is not a problem")
}

func TestContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := Nodes(ctx, timeout, []driver.Conn{memredis.New().Conn()}, nil)
	assert.ErrorIs(t, err, context.Canceled)
}

func TestReportWorstAndErr(t *testing.T) {
	finding := func(setting string, st Status) Finding {
		return Finding{Setting: setting, Source: "server", Value: "v", Status: st, Why: "because"}
	}
	for _, tc := range []struct {
		name    string
		rep     Report
		worst   Status
		wantErr string // "" for none
	}{
		{"empty", Report{}, OK, ""},
		{"unknown below warning", Report{Masters: []NodeReport{{Node: "master 0", Findings: []Finding{
			finding("save", Unknown), finding("appendonly", Warning), finding("role", OK)}}}}, Warning, ""},
		{"problem on a master", Report{Masters: []NodeReport{
			{Node: "master 0", Findings: []Finding{finding("role", OK)}},
			{Node: "master 1", Addr: "10.0.0.2:6379", Findings: []Finding{finding("maxmemory-policy", Problem)}},
		}}, Problem, `master 1 (10.0.0.2:6379) maxmemory-policy is "v": because`},
		{"problem on the fence counter only", Report{
			Masters: []NodeReport{{Node: "master 0", Findings: []Finding{finding("role", Unknown)}}},
			Fence:   &NodeReport{Node: "fence counter", Findings: []Finding{finding("appendfsync", Problem)}},
		}, Problem, `fence counter appendfsync is "v": because`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.worst, tc.rep.Worst())
			err := tc.rep.Err()
			if tc.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrUnsafe)
			assert.Equal(t, ErrUnsafe.Error()+": "+tc.wantErr, err.Error())
		})
	}
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

// TestReachable: only a "reachable" finding makes a node unreachable.
func TestReachable(t *testing.T) {
	assert.True(t, NodeReport{Findings: []Finding{{Setting: "role", Status: Unknown}}}.Reachable())
	assert.False(t, NodeReport{Findings: []Finding{{Setting: "reachable", Value: "no", Status: Warning}}}.Reachable())
}

// TestHungFenceNode: a fence counter's node that never answers costs one
// timeout for INFO and one for the first CONFIG GET, then is reported
// unreachable; the calls given up end later without touching the report
// (the race detector watches).
func TestHungFenceNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		master, counter := memredis.New(), memredis.New()
		counter.Hang()
		start := time.Now()
		rep, err := Nodes(context.Background(), 100*time.Millisecond, []driver.Conn{master.Conn()}, counter.Conn())
		require.NoError(t, err)
		assert.Equal(t, 200*time.Millisecond, time.Since(start), "not bounded by two timeouts")
		require.NotNil(t, rep.Fence)
		assert.False(t, rep.Fence.Reachable())
		assert.Equal(t, Unknown, statuses(*rep.Fence)["appendfsync"])
		assert.True(t, rep.Masters[0].Reachable())
		counter.Resume()
	})
}

// TestReportString: a report prints as a table, one line per finding with
// its node, address, setting, value ("-" when unknown), status and why, the
// fence counter's after the masters', then the worst status: what
// redlock-bench check prints, and what %v of a Report shows.
func TestReportString(t *testing.T) {
	rep := Report{
		Masters: []NodeReport{{Node: "master 0", Addr: "10.0.0.1:6379", Findings: []Finding{
			{Setting: "appendonly", Source: "server", Value: "no", Status: Problem, Why: "a restart forgets the locks"},
			{Setting: "maxmemory-policy", Source: "server", Status: Unknown, Why: "could not be read"},
		}}},
		Fence: &NodeReport{Node: "fence counter", Addr: "10.0.0.9:6379", Findings: []Finding{
			{Setting: "appendfsync", Source: "server", Value: "always", Status: OK, Why: "every mint is on disk"},
		}},
	}
	lines := strings.Split(strings.TrimSuffix(fmt.Sprint(rep), "\n"), "\n")
	require.Len(t, lines, 5, fmt.Sprint(rep))
	assert.Equal(t, []string{"NODE", "ADDR", "SETTING", "VALUE", "STATUS", "WHY"}, strings.Fields(lines[0]))
	assert.Regexp(t, `^master 0\s+10\.0\.0\.1:6379\s+appendonly\s+no\s+problem\s+a restart forgets the locks$`, lines[1])
	assert.Regexp(t, `^master 0\s+10\.0\.0\.1:6379\s+maxmemory-policy\s+-\s+unknown\s+could not be read$`, lines[2])
	assert.Regexp(t, `^fence counter\s+10\.0\.0\.9:6379\s+appendfsync\s+always\s+ok\s+every mint is on disk$`, lines[3])
	assert.Equal(t, "worst: problem", lines[4])
	var b strings.Builder
	n, err := rep.WriteTo(&b)
	require.NoError(t, err)
	assert.Equal(t, int64(b.Len()), n)
	assert.Equal(t, rep.String(), b.String())
}
