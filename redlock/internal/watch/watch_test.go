package watch

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/clockdrift"
	"quorumlock.dev/driver"
	"quorumlock.dev/internal/harness/memredis"
)

// The watcher's logic in virtual time: masters are in-memory servers
// (internal/harness/memredis: INFO with run_id and uptime, TIME on a clock a test
// steps) inside a testing/synctest bubble, so that every bound is exact.
// What only a real server shows (redis-server's uptime, go-redis's reads
// of a hung master, ACLs) is tested through redlock's API in package redlock.

const (
	factor   = 0.01
	constant = 2 * time.Millisecond
)

// holdOf is the hold a TTL of ttl sets: ttl and its drift allowance.
func holdOf(ttl time.Duration) time.Duration {
	return ttl + clockdrift.Allowance(ttl, factor, constant)
}

// recorder keeps what the hooks and the log were told.
type recorder struct {
	mu       sync.Mutex
	out      map[string][]time.Time
	restored map[string]int
	jumped   map[string][]time.Duration
	drift    map[string][]float64
	logs     strings.Builder
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.logs.Write(p)
}

func (r *recorder) log() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.logs.String()
}

func (r *recorder) quarantines(addr string) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.out[addr]...)
}

func (r *recorder) restores(addr string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.restored[addr]
}

func (r *recorder) jumps(addr string) []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.jumped[addr]...)
}

func (r *recorder) rates(addr string) []float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]float64(nil), r.drift[addr]...)
}

// start starts a watcher of masters whose hooks and log go to a new
// recorder; cfg gives the rest. It is closed when the test ends.
func start(t *testing.T, masters []driver.Conn, cfg Config) (*Watcher, *recorder) {
	t.Helper()
	r := &recorder{out: map[string][]time.Time{}, restored: map[string]int{}, jumped: map[string][]time.Duration{}, drift: map[string][]float64{}}
	cfg.Masters = masters
	cfg.Labels = make([]string, len(masters))
	for i, m := range masters {
		cfg.Labels[i] = driver.Describe(m).Addr
		if d := driver.Describe(m); d.Addr == "" && d.Name != "" {
			cfg.Labels[i] = d.Name // a server in memory
		}
		if cfg.Labels[i] == "" {
			cfg.Labels[i] = fmt.Sprintf("master %d", i)
		}
	}
	if cfg.NodeTimeout == 0 {
		cfg.NodeTimeout = 50 * time.Millisecond
	}
	cfg.DriftFactor, cfg.DriftConstant = factor, constant
	cfg.Logger = slog.New(slog.NewTextHandler(r, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg.Quarantined = func(addr string, until time.Time) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.out[addr] = append(r.out[addr], until)
	}
	cfg.Restored = func(addr string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.restored[addr]++
	}
	cfg.Jumped = func(addr string, by time.Duration) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.jumped[addr] = append(r.jumped[addr], by)
	}
	cfg.Drift = func(addr string, rate float64) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.drift[addr] = append(r.drift[addr], rate)
	}
	w := Start(cfg)
	t.Cleanup(func() { w.Close(time.Now()) })
	return w, r
}

// memMasters starts n in-memory masters; call it inside the bubble.
func memMasters(n int) ([]*memredis.Server, []driver.Conn) {
	servers := make([]*memredis.Server, n)
	masters := make([]driver.Conn, n)
	for i := range n {
		servers[i] = memredis.New()
		masters[i] = servers[i].Conn()
	}
	return servers, masters
}

// inspector is a master that can read INFO and TIME.
type inspector interface {
	driver.Conn
	driver.Inspector
}

// gated is a master whose INFO and TIME wait for a value on gate (or its
// close), whatever their context says: a go-redis client with no read
// timeout does the same.
type gated struct {
	inspector
	gate chan struct{}
}

func (g gated) Info(ctx context.Context, section string) (string, error) {
	<-g.gate
	return g.inspector.Info(context.WithoutCancel(ctx), section)
}

func (g gated) Time(ctx context.Context) (time.Time, error) {
	<-g.gate
	return g.inspector.Time(context.WithoutCancel(ctx))
}

// tickAfter is the first tick after at of a watcher started at t0.
func tickAfter(t0, at time.Time, interval time.Duration) time.Time {
	return t0.Add(at.Sub(t0).Truncate(interval) + interval)
}

// A master that restarts is out from the sample that sees it until the
// longest hold after the least start its uptime allows (a second after
// the uptime says); told again when a longer TTL moves that end, and when
// it counts again.
func TestRestartQuarantineVirtual(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		servers, masters := memMasters(3)
		time.Sleep(time.Hour) // the masters' uptime
		w, r := start(t, masters, Config{Interval: 100 * time.Millisecond, RestartGuard: true})
		t0 := time.Now()
		synctest.Wait()
		for i := range masters {
			require.NotEmpty(t, w.Progress(i).RunID, "master %d not sampled", i)
		}
		const ttl = 10 * time.Second
		w.Issued(ttl)
		w.Issued(time.Second) // not a new maximum
		for i := range masters {
			assert.False(t, w.Quarantined(i), "master %d out with an hour of uptime", i)
		}

		time.Sleep(50 * time.Millisecond)
		servers[1].Restart()
		addr := servers[1].Addr()
		// The sample at 100 ms reads an uptime of 0: it started at most a
		// second after that sample.
		time.Sleep(50 * time.Millisecond)
		synctest.Wait()
		start := t0.Add(1100 * time.Millisecond)
		assert.True(t, w.Quarantined(1))
		assert.False(t, w.Quarantined(0))
		assert.False(t, w.Quarantined(2))
		assert.Equal(t, []time.Time{start.Add(holdOf(ttl))}, r.quarantines(addr))
		assert.Contains(t, r.log(), `level=WARN msg="redlock: master restarted" master=`+addr)
		assert.Contains(t, r.log(), `level=WARN msg="redlock: master restarted less than the longest TTL ago`)

		// A longer TTL moves the end: told at the next sample.
		w.Issued(2 * ttl)
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		assert.Equal(t, []time.Time{start.Add(holdOf(ttl)), start.Add(holdOf(2 * ttl))}, r.quarantines(addr))
		assert.Equal(t, 1, strings.Count(r.log(), "less than the longest TTL ago"), "warned once")

		// Out until exactly then; told at the first tick after.
		end := start.Add(holdOf(2 * ttl))
		time.Sleep(time.Until(end) - 1)
		assert.True(t, w.Quarantined(1))
		time.Sleep(1)
		assert.False(t, w.Quarantined(1))
		assert.Zero(t, r.restores(addr), "told before the tick")
		time.Sleep(time.Until(tickAfter(t0, end, 100*time.Millisecond)))
		synctest.Wait()
		assert.Equal(t, 1, r.restores(addr))
		assert.Contains(t, r.log(), `level=INFO msg="redlock: master counts toward a quorum again" master=`+addr)
		assert.Len(t, r.quarantines(servers[0].Addr()), 0)
		assert.Len(t, r.quarantines(servers[2].Addr()), 0)
	})
}

// A master that replies after failures is out at once, unreported; a
// sample sent before the suspicion cannot clear it, the next one does.
func TestSuspectVirtual(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, masters := memMasters(3)
		time.Sleep(time.Hour)
		g := gated{masters[0].(inspector), make(chan struct{})}
		masters[0] = g
		w, r := start(t, masters, Config{Interval: time.Second, RestartGuard: true})
		g.gate <- struct{}{} // the first sample
		w.Issued(10 * time.Second)
		time.Sleep(time.Second + time.Millisecond) // the second is in flight
		require.True(t, w.Progress(0).Sampling)

		w.Suspect(0)
		assert.True(t, w.Quarantined(0), "a suspect counts")
		g.gate <- struct{}{} // the sample sent before the suspicion
		synctest.Wait()
		assert.True(t, w.Quarantined(0), "a sample sent before the suspicion cleared it")
		g.gate <- struct{}{} // the one sent after: the master is an hour old
		synctest.Wait()
		assert.False(t, w.Quarantined(0))
		assert.Empty(t, r.quarantines("master 0"), "a suspicion that a sample cleared is not reported")
		assert.NotContains(t, r.log(), "redlock: master")
		for i := 1; i < 3; i++ {
			assert.False(t, w.Quarantined(i))
		}
		close(g.gate)
	})
}

// A forward step of a master's clock keeps it out from the sample that
// sees it until a hold after the sample that tells it a jump, with a
// Jumped hook of the step; a step back is told, never quarantined.
func TestClockJumpVirtual(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		servers, masters := memMasters(2)
		const ttl = 10 * time.Second
		w, r := start(t, masters, Config{Interval: 100 * time.Millisecond, ClockMonitor: true, ClockQuarantine: true})
		t0 := time.Now()
		w.Issued(ttl)
		time.Sleep(2050 * time.Millisecond)
		fwd, back := servers[0].Addr(), servers[1].Addr()
		for _, addr := range []string{fwd, back} {
			rates := r.rates(addr)
			require.Len(t, rates, 11, "estimates from the 11th sample (a second of them) on")
			for _, rate := range rates {
				assert.Equal(t, 1.0, rate)
			}
		}
		assert.Equal(t, 21, w.Progress(0).Clock)
		require.Empty(t, r.quarantines(fwd))

		servers[0].StepClock(ttl)
		servers[1].StepClock(-time.Second)
		time.Sleep(50 * time.Millisecond) // the sample at 2.1 s sees the steps
		synctest.Wait()
		assert.True(t, w.Quarantined(0), "out from the sample that saw the step")
		assert.Equal(t, []time.Time{t0.Add(2100 * time.Millisecond).Add(holdOf(ttl))}, r.quarantines(fwd), "a hold from now")
		assert.Empty(t, r.jumps(fwd), "a step is told a jump by the sample after it")
		assert.Contains(t, r.log(), `level=WARN msg="redlock: master's clock stepped between two samples (a jump or a change of rate)" master=`+fwd+" by=10s quarantined=true")
		assert.Contains(t, r.log(), `master=`+back+" by=-1s quarantined=false")

		time.Sleep(100 * time.Millisecond) // the sample at 2.2 s: a jump, and the episode ends
		synctest.Wait()
		assert.Equal(t, []time.Duration{ttl}, r.jumps(fwd))
		assert.Equal(t, []time.Duration{-time.Second}, r.jumps(back))
		end := t0.Add(2200 * time.Millisecond).Add(holdOf(ttl))
		assert.Equal(t, []time.Time{t0.Add(2100 * time.Millisecond).Add(holdOf(ttl)), end}, r.quarantines(fwd), "told again when it ends")
		time.Sleep(time.Until(end) - 1)
		assert.True(t, w.Quarantined(0))
		time.Sleep(1)
		assert.False(t, w.Quarantined(0))
		time.Sleep(time.Until(tickAfter(t0, end, 100*time.Millisecond)))
		synctest.Wait()
		assert.Equal(t, 1, r.restores(fwd))
		assert.False(t, w.Quarantined(1), "a step back quarantines")
		assert.Empty(t, r.quarantines(back))
		assert.Equal(t, 2, strings.Count(r.log(), "clock stepped"), "one step of each, told once")
		assert.NotContains(t, r.log(), "drift allowance")
	})
}

// Close returns by its bound, however long a sample of a master that
// hangs takes; then every master counts, and the late sample changes
// nothing.
func TestCloseVirtual(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, masters := memMasters(3)
		g := gated{masters[2].(inspector), make(chan struct{})}
		masters[2] = g
		w, _ := start(t, masters, Config{Interval: 100 * time.Millisecond, RestartGuard: true, ClockMonitor: true, ClockQuarantine: true, NodeTimeout: 100 * time.Millisecond})
		w.Issued(time.Minute)
		synctest.Wait()
		require.True(t, w.Progress(2).Sampling)
		m := &w.masters[1]
		m.mu.Lock()
		m.clock.out = clockOpen // as if its clock had stepped forward
		m.publish()
		m.mu.Unlock()
		require.True(t, w.Quarantined(1))
		w.Suspect(0)
		require.True(t, w.Quarantined(0))

		start := time.Now()
		w.Close(start.Add(100 * time.Millisecond))
		assert.Equal(t, 100*time.Millisecond, time.Since(start), "Close did not return by its bound")
		for i := range masters {
			assert.False(t, w.Quarantined(i), "master %d out after Close", i)
		}
		w.Suspect(1)
		assert.False(t, w.Quarantined(1), "a suspicion after Close")
		close(g.gate)
		synctest.Wait()
		assert.False(t, w.Progress(2).Sampling)
		for i := range masters {
			assert.False(t, w.Quarantined(i), "master %d out after a late sample", i)
		}
		w.Close(time.Now()) // idempotent
	})
}

// plain is a master with no capability but the lock's.
type plain struct{ driver.Conn }

// cluster is a master that says it is a cluster.
type cluster struct{ inspector }

func (cluster) Describe() driver.Description {
	return driver.Description{Cluster: []string{"a:1", "b:2"}}
}

// A master that cannot be watched is never quarantined; each feature
// says so once.
func TestUnwatchedVirtual(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, masters := memMasters(2)
		masters[0] = plain{masters[0]}
		masters[1] = cluster{masters[1].(inspector)}
		w, r := start(t, masters, Config{Interval: 100 * time.Millisecond, RestartGuard: true, ClockMonitor: true, ClockQuarantine: true})
		w.Issued(time.Minute)
		w.Suspect(0)
		w.Suspect(1)
		time.Sleep(time.Second)
		synctest.Wait()
		for i := range masters {
			assert.False(t, w.Quarantined(i))
			assert.Equal(t, Progress{}, w.Progress(i))
		}
		logs := r.log()
		assert.Contains(t, logs, `msg="redlock: the restart guard does not watch this master (its driver cannot read INFO or TIME); it is never quarantined" master="master 0"`)
		assert.Contains(t, logs, `msg="redlock: the clock monitor does not watch this master (its driver cannot read INFO or TIME)" master="master 0"`)
		assert.Contains(t, logs, `msg="redlock: the restart guard does not watch this master (it is a cluster); it is never quarantined" master="master 1"`)
		assert.Contains(t, logs, `msg="redlock: the clock monitor does not watch this master (it is a cluster)" master="master 1"`)
		assert.Equal(t, 4, strings.Count(logs, "\n"), logs)
	})
}

// What the acquire path calls allocates nothing.
func TestAcquirePathAllocs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, masters := memMasters(3)
		w, _ := start(t, masters, Config{Interval: time.Hour, RestartGuard: true, ClockMonitor: true, ClockQuarantine: true})
		synctest.Wait() // the first samples ended
		ttl := time.Second
		allocs := testing.AllocsPerRun(100, func() {
			ttl++ // a new maximum every time
			w.Issued(ttl)
			w.Issued(time.Millisecond)
			for i := range masters {
				_ = w.Quarantined(i)
			}
		})
		assert.Zero(t, allocs)
	})
}

func TestNilWatcher(t *testing.T) {
	var w *Watcher
	w.Issued(time.Second)
	w.Suspect(0)
	assert.False(t, w.Quarantined(0))
	w.Close(time.Now())
}

func TestParseServerInfo(t *testing.T) {
	for _, tc := range []struct {
		in     string
		id     string
		uptime time.Duration
		ok     bool
	}{
		{"# Server\r\nredis_version:7.0.15\r\nrun_id:abc\r\nuptime_in_seconds:42\r\n", "abc", 42 * time.Second, true},
		{"run_id:abc\r\n", "", 0, false},
		{"uptime_in_seconds:3\r\n", "", 3 * time.Second, false},
		{"run_id:abc\r\nuptime_in_seconds:-1\r\n", "", 0, false},
		{"", "", 0, false},
	} {
		id, up, ok := parseServerInfo(tc.in)
		assert.Equal(t, tc.ok, ok, tc.in)
		if tc.ok {
			assert.Equal(t, tc.id, id)
			assert.Equal(t, tc.uptime, up)
		}
	}
}
