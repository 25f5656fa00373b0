package redlockprom

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/fence"
	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
	"quorumlock.dev/redlock"
	"quorumlock.dev/redlock/check"

	"quorumlock.dev/driver"

	"quorumlock.dev/driver/goredis"
)

// scrape reads every series of reg: a counter's or gauge's value, a
// histogram's sample count, by "name{label=value,...}".
func scrape(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var v float64
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				v = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				v = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				v = float64(m.GetHistogram().GetSampleCount())
			default:
				t.Fatalf("unexpected type %v of %s", f.GetType(), f.GetName())
			}
			out[series(f.GetName(), m.GetLabel())] = v
		}
	}
	return out
}

func series(name string, labels []*dto.LabelPair) string {
	if len(labels) == 0 {
		return name
	}
	parts := make([]string, len(labels))
	for i, l := range labels {
		parts[i] = l.GetName() + "=" + l.GetValue()
	}
	sort.Strings(parts)
	return name + "{" + strings.Join(parts, ",") + "}"
}

// dialOnce is a go-redis client that fails at once on a server that is gone.
func dialOnce(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, DialerRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newMetrics(t *testing.T) (*Metrics, *prometheus.Registry) {
	t.Helper()
	m, err := New("quorumlock")
	require.NoError(t, err)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	return m, reg
}

// TestSeriesMove drives real clients on real redis-server processes, and a
// real fence guard, through every event the metrics count, and checks on
// scrapes of the registry that each series moved.
func TestSeriesMove(t *testing.T) {
	const (
		nodeTimeout = 200 * time.Millisecond
		ttl         = 5 * time.Second
	)
	servers := redistest.StartN(t, 5, redisserver.Options{})
	masterServers, fenceServer, storeServer := servers[:3], servers[3], servers[4]
	unsafeServer := redistest.Start(t, redisserver.Options{Args: []string{"--maxmemory-policy", "allkeys-lru"}})
	addr := func(i int) string { return masterServers[i].Addr() }
	masters := func() []driver.Conn {
		ms := make([]driver.Conn, len(masterServers))
		for i, s := range masterServers {
			ms[i] = goredis.Conn(dialOnce(t, s.Addr()))
		}
		return ms
	}
	m, reg := newMetrics(t)
	before := scrape(t, reg)
	for _, o := range attemptOutcomes {
		v, ok := before["quorumlock_lock_acquire_attempts_total{outcome="+o+"}"]
		assert.True(t, ok && v == 0, "outcome %s does not start at 0", o)
	}
	for _, r := range renewalReasons {
		v, ok := before["quorumlock_lock_renewal_failures_total{reason="+r+"}"]
		assert.True(t, ok && v == 0, "reason %s does not start at 0", r)
	}
	moved := map[string]float64{} // series seen to move while the test ran, for gauges that move back
	watch := func(name string) {
		t.Helper()
		now := scrape(t, reg)
		require.NotEqual(t, before[name], now[name], "%s did not move", name)
		moved[name] = now[name]
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	counter, err := fence.NewRedisCounter(goredis.Conn(dialOnce(t, fenceServer.Addr())))
	require.NoError(t, err)
	c, err := redlock.New(masters(), redlock.WithHooks(m.Hooks()), redlock.WithFence(counter),
		redlock.WithNodeTimeout(nodeTimeout), redlock.WithRetry(0, 10*time.Millisecond, 10*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })

	// Acquired, then refused, extended; a waiter that wins after the release.
	l, err := c.TryLock(ctx, "metrics:a", ttl)
	require.NoError(t, err)
	_, err = c.TryLock(ctx, "metrics:a", ttl)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.NoError(t, l.Extend(ctx, ttl))
	won := make(chan *redlock.Lock, 1)
	go func() {
		l2, err := c.Lock(ctx, "metrics:a", ttl)
		assert.NoError(t, err)
		won <- l2
	}()
	require.Eventually(t, func() bool { return scrape(t, reg)["quorumlock_lock_waiters"] == 1 }, 10*time.Second, 5*time.Millisecond)
	watch("quorumlock_lock_waiters")
	require.NoError(t, l.Unlock(ctx))
	l2 := <-won
	require.NotNil(t, l2)
	assert.Zero(t, scrape(t, reg)["quorumlock_lock_waiters"], "a Lock that won still counts as a waiter")
	err = l.Extend(ctx, ttl)
	require.ErrorIs(t, err, redlock.ErrLockNotHeld)

	// The holder of the older fence writes after the newer one: refused.
	guard := fence.RedisGuard{OnReject: m.FenceRejected}
	store := dialOnce(t, storeServer.Addr())
	older, _ := l.Fence()
	newer, _ := l2.Fence()
	require.Less(t, older, newer)
	require.NoError(t, guard.Set(ctx, goredis.Conn(store), "metrics:stock", "from the new holder", newer, 0))
	require.ErrorIs(t, guard.Set(ctx, goredis.Conn(store), "metrics:stock", "from the old holder", older, 0), fence.ErrFenceRejected)
	require.NoError(t, l2.Unlock(ctx))

	// A holder that makes no progress loses the lock to its renewer.
	short := time.Second
	l3, err := c.TryLock(ctx, "metrics:stalled", short)
	require.NoError(t, err)
	require.NoError(t, l3.Renew(short, time.Minute))
	select {
	case <-l3.Done():
	case <-ctx.Done():
		t.Fatal("the renewer never ended the stalled lock")
	}
	require.Eventually(t, func() bool { return scrape(t, reg)[`quorumlock_lock_renewal_failures_total{reason=no_progress}`] == 1 },
		10*time.Second, 5*time.Millisecond)

	// A caller whose context had ended: not attempted, counted as such.
	ended, stop := context.WithCancel(ctx)
	stop()
	_, err = c.TryLock(ended, "metrics:cancelled", ttl)
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, redlock.ErrNotAcquired)

	// The fence counter gone: the quorum is won, the lock is not handed out.
	require.NoError(t, fenceServer.Kill())
	_, err = c.TryLock(ctx, "metrics:nofence", ttl)
	require.ErrorIs(t, err, redlock.ErrFenceUnavailable)

	// A strict client over a master that evicts: refused, and Check's
	// findings recorded.
	// A node timeout long enough that Check reads the policy on a loaded machine.
	unsafe, err := redlock.New([]driver.Conn{goredis.Conn(dialOnce(t, unsafeServer.Addr()))}, redlock.WithHooks(m.Hooks()),
		redlock.WithStrictCheck(), redlock.WithNodeTimeout(time.Second))
	require.NoError(t, err)
	_, err = unsafe.TryLock(ctx, "metrics:unsafe", ttl)
	require.ErrorIs(t, err, check.ErrUnsafe)
	report, err := unsafe.Check(ctx)
	require.NoError(t, err)
	m.RecordCheck(report)

	// The restart guard: a master restarted without persistence is
	// quarantined for the longest TTL issued (plus a second), then counts
	// again. The servers of this test are young: they may be quarantined
	// already by the first TTL issued, which the restart then prolongs.
	guarded, err := redlock.New(masters(), redlock.WithHooks(m.Hooks()), redlock.WithRestartGuard(nodeTimeout),
		redlock.WithNodeTimeout(nodeTimeout))
	require.NoError(t, err)
	t.Cleanup(func() { _ = guarded.Close() })
	const guardedTTL = 3 * time.Second // the quarantine's length: room for a loaded machine to see it
	if l4, err := guarded.TryLock(ctx, "metrics:guarded", guardedTTL); err == nil {
		_ = l4.Unlock(ctx)
	}
	require.NoError(t, masterServers[1].Kill())
	require.NoError(t, masterServers[1].Restart(ctx))
	quarantined := fmt.Sprintf("quorumlock_lock_master_quarantined{master=%s}", addr(1))
	require.Eventually(t, func() bool { return scrape(t, reg)[quarantined] == 1 }, 10*time.Second, 10*time.Millisecond)
	watch(quarantined)
	_, _ = guarded.TryLock(ctx, "metrics:guarded:2", guardedTTL) // its vote on master 1 is not counted
	require.Eventually(t, func() bool {
		return scrape(t, reg)[fmt.Sprintf("quorumlock_lock_master_votes_total{master=%s,vote=quarantined}", addr(1))] > 0
	}, 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return scrape(t, reg)[quarantined] == 0 }, 20*time.Second, 20*time.Millisecond, "never restored")

	// Two masters of three gone: no quorum.
	require.NoError(t, masterServers[1].Kill())
	require.NoError(t, masterServers[2].Kill())
	_, err = c.TryLock(ctx, "metrics:noquorum", ttl)
	require.ErrorIs(t, err, redlock.ErrQuorumUnavailable)

	// The clock monitor's hooks are called directly: the monitor's own
	// tests drive a master's clock.
	m.masterDrift(addr(0), 1.02)
	m.masterClockJumped(addr(0), 2*time.Second)

	// Every series that these events reach moved. Votes arrive from the
	// masters the rounds did not wait for, after the attempts returned.
	want := []string{
		"quorumlock_lock_acquire_attempts_total{outcome=acquired}",
		"quorumlock_lock_acquire_attempts_total{outcome=not_acquired}",
		"quorumlock_lock_acquire_attempts_total{outcome=quorum_unavailable}",
		"quorumlock_lock_acquire_attempts_total{outcome=fence_unavailable}",
		"quorumlock_lock_acquire_attempts_total{outcome=unsafe_config}",
		"quorumlock_lock_acquire_attempts_total{outcome=cancelled}",
		"quorumlock_lock_acquire_duration_seconds",
		"quorumlock_lock_acquire_wait_seconds{outcome=acquired}",
		"quorumlock_lock_acquire_wait_seconds{outcome=not_acquired}",
		"quorumlock_lock_acquired_validity_seconds",
		"quorumlock_lock_hold_duration_seconds{outcome=unlocked}",
		"quorumlock_lock_hold_duration_seconds{outcome=no_progress}",
		"quorumlock_lock_extensions_total{outcome=extended}",
		"quorumlock_lock_extensions_total{outcome=not_held}",
		"quorumlock_lock_renewal_failures_total{reason=no_progress}",
		"quorumlock_lock_fence_rejected_total",
		fmt.Sprintf("quorumlock_lock_master_votes_total{master=%s,vote=agreed}", addr(0)),
		fmt.Sprintf("quorumlock_lock_master_votes_total{master=%s,vote=refused}", addr(0)),
		fmt.Sprintf("quorumlock_lock_master_votes_total{master=%s,vote=quarantined}", addr(1)),
		fmt.Sprintf("quorumlock_lock_master_votes_total{master=%s,vote=failed}", addr(2)),
		fmt.Sprintf("quorumlock_lock_master_vote_duration_seconds{master=%s}", addr(0)),
		fmt.Sprintf("quorumlock_lock_master_quarantines_total{master=%s}", addr(1)),
		fmt.Sprintf("quorumlock_lock_master_clock_drift_ratio{master=%s}", addr(0)),
		fmt.Sprintf("quorumlock_lock_master_clock_jumps_total{master=%s}", addr(0)),
		fmt.Sprintf("quorumlock_lock_check_problems{node=%s}", unsafeServer.Addr()),
	}
	require.Eventually(t, func() bool {
		return scrape(t, reg)[fmt.Sprintf("quorumlock_lock_master_votes_total{master=%s,vote=failed}", addr(2))] > 0
	}, 10*time.Second, 10*time.Millisecond)
	after := scrape(t, reg)
	for _, name := range want {
		assert.NotEqual(t, before[name], after[name], "%s did not move", name)
	}
	assert.InDelta(t, 0.02, after[fmt.Sprintf("quorumlock_lock_master_clock_drift_ratio{master=%s}", addr(0))], 1e-9)
	assert.Equal(t, 1.0, after[fmt.Sprintf("quorumlock_lock_check_problems{node=%s}", unsafeServer.Addr())])
	assert.Equal(t, 1.0, after["quorumlock_lock_fence_rejected_total"])

	// Every metric family moved, by one series or another.
	families := map[string]bool{}
	for name := range after {
		families[strings.SplitN(name, "{", 2)[0]] = false
	}
	for name, v := range after {
		if v != before[name] {
			families[strings.SplitN(name, "{", 2)[0]] = true
		}
	}
	for name := range moved {
		families[strings.SplitN(name, "{", 2)[0]] = true
	}
	for name, ok := range families {
		assert.True(t, ok, "no series of %s moved", name)
	}
	assert.Len(t, families, len(registered(t, m)), "a family was never gathered")
}

// Label cardinality does not grow with resource names: a hundred
// resources make no series that one did not.
func TestSeriesDoNotGrowWithResources(t *testing.T) {
	servers := redistest.StartN(t, 3, redisserver.Options{})
	ms := make([]driver.Conn, len(servers))
	for i, s := range servers {
		ms[i] = goredis.Conn(dialOnce(t, s.Addr()))
	}
	m, reg := newMetrics(t)
	c, err := redlock.New(ms, redlock.WithHooks(m.Hooks()), redlock.WithNodeTimeout(200*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx := t.Context()
	cycle := func(resource string) {
		l, err := c.TryLock(ctx, resource, 5*time.Second)
		require.NoError(t, err)
		_, err = c.TryLock(ctx, resource, 5*time.Second)
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		require.NoError(t, l.Extend(ctx, 5*time.Second))
		require.NoError(t, l.Unlock(ctx))
	}
	cycle("cardinality:first")
	one := len(scrape(t, reg))
	for i := range 100 {
		cycle(fmt.Sprintf("cardinality:%d", i))
	}
	assert.Equal(t, one, len(scrape(t, reg)))
	for name := range scrape(t, reg) {
		assert.NotContains(t, name, "cardinality:", "a resource name in a label")
	}
}

// The names and help texts follow Prometheus's conventions (promlint).
func TestLint(t *testing.T) {
	m, _ := newMetrics(t)
	// Touch every vector so that it has a series to lint.
	m.vote(t.Context(), redlock.Event{Master: "127.0.0.1:6379", Outcome: "agreed", Took: time.Millisecond})
	m.masterQuarantined("127.0.0.1:6379", time.Now())
	m.masterDrift("127.0.0.1:6379", 1)
	m.RecordCheck(check.Report{Masters: []check.NodeReport{{Node: "master 0", Addr: "127.0.0.1:6379"}}})
	problems, err := testutil.CollectAndLint(m)
	require.NoError(t, err)
	assert.Empty(t, problems)
}

func TestNewNamespace(t *testing.T) {
	for _, ns := range []string{"", "quorumlock", "my_app"} {
		m, err := New(ns)
		require.NoError(t, err, ns)
		want := "lock_fence_rejected_total"
		if ns != "" {
			want = ns + "_" + want
		}
		assert.Contains(t, registered(t, m), want)
	}
	for _, ns := range []string{"my-app", "1app", "a b", "ü"} {
		_, err := New(ns)
		assert.ErrorIs(t, err, redlock.ErrInvalidArgument, ns)
	}
}

// A quarantine whose end moves later is one quarantine; a restore ends it.
func TestQuarantineCounting(t *testing.T) {
	m, reg := newMetrics(t)
	const a = "127.0.0.1:1"
	m.masterQuarantined(a, time.Now().Add(time.Second))
	m.masterQuarantined(a, time.Now().Add(2*time.Second))
	s := scrape(t, reg)
	assert.Equal(t, 1.0, s["quorumlock_lock_master_quarantines_total{master="+a+"}"])
	assert.Equal(t, 1.0, s["quorumlock_lock_master_quarantined{master="+a+"}"])
	m.masterRestored(a)
	m.masterQuarantined(a, time.Now().Add(time.Second))
	s = scrape(t, reg)
	assert.Equal(t, 2.0, s["quorumlock_lock_master_quarantines_total{master="+a+"}"])
	_, drift := s["quorumlock_lock_master_clock_drift_ratio{master="+a+"}"]
	assert.False(t, drift, "a drift reported for a master never measured")
}

// Each outcome the hooks are told moves its own series, and a word that a
// later redlock may add moves the catch-all one instead of making a series.
// A renewed lock that ended other than by Unlock is a renewal failure; one
// without a renewer, or unlocked, is not.
func TestOutcomes(t *testing.T) {
	m, reg := newMetrics(t)
	ctx := t.Context()
	for _, o := range attemptOutcomes {
		m.attempt(ctx, redlock.Event{Outcome: o})
	}
	m.attempt(ctx, redlock.Event{Outcome: "a_word_from_the_future"})
	for _, o := range extendOutcomes {
		m.extend(ctx, "r")(redlock.Event{Outcome: o})
	}
	for _, r := range renewalReasons {
		m.hold(ctx, "r")(redlock.Event{Outcome: r, Renewed: true})
	}
	m.hold(ctx, "r")(redlock.Event{Outcome: "unlocked", Renewed: true})
	m.hold(ctx, "r")(redlock.Event{Outcome: "lease_ran_out"})
	s := scrape(t, reg)
	for _, o := range attemptOutcomes[:len(attemptOutcomes)-1] {
		assert.Equal(t, 1.0, s["quorumlock_lock_acquire_attempts_total{outcome="+o+"}"], o)
	}
	assert.Equal(t, 2.0, s["quorumlock_lock_acquire_attempts_total{outcome=error}"])
	for _, o := range extendOutcomes {
		assert.Equal(t, 1.0, s["quorumlock_lock_extensions_total{outcome="+o+"}"], o)
	}
	for _, r := range renewalReasons {
		assert.Equal(t, 1.0, s["quorumlock_lock_renewal_failures_total{reason="+r+"}"], r)
	}
	assert.Equal(t, 2.0, s["quorumlock_lock_hold_duration_seconds{outcome=lease_ran_out}"])
	assert.Equal(t, 1.0, s["quorumlock_lock_hold_duration_seconds{outcome=unlocked}"])
}

// The hooks allocate nothing once a master's series exist.
func TestHookAllocs(t *testing.T) {
	m, _ := newMetrics(t)
	h := m.Hooks()
	ctx := t.Context()
	h.Vote(ctx, redlock.Event{Master: "127.0.0.1:6379", Outcome: "agreed"})
	allocs := testing.AllocsPerRun(1000, func() {
		h.Vote(ctx, redlock.Event{Master: "127.0.0.1:6379", Outcome: "refused", Took: time.Millisecond})
		_, done := h.Acquire(ctx, "r")
		h.Attempt(ctx, redlock.Event{Outcome: "acquired", Took: time.Millisecond, Validity: time.Second})
		done(redlock.Event{Outcome: "acquired", Took: 2 * time.Millisecond})
		h.Waiting(1)
		h.Waiting(-1)
		h.Hold(ctx, "r")(redlock.Event{Outcome: "unlocked", Took: time.Second})
		h.Extend(ctx, "r")(redlock.Event{Outcome: "extended"})
	})
	assert.Zero(t, allocs)
}
