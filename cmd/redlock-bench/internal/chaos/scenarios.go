package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"quorumlock.dev/cmd/redlock-bench/internal/netns"
	"quorumlock.dev/cmd/redlock-bench/internal/sentinel"
	"quorumlock.dev/internal/childproc"
	"quorumlock.dev/internal/clockshim"
	"quorumlock.dev/internal/redisserver"
	"quorumlock.dev/redlock"
)

// scenario is one way a Redis lock fails, and what must hold while it does.
type scenario struct {
	name    string
	variant string // how the fault is made, where there is a choice ("redis-server" by default)
	about   string // one line for the usage text

	proxied     bool          // masters behind fault proxies
	mustObserve bool          // the lock alone cannot hold here: an overlap or a stale write must be seen
	guard       bool          // the workers' clients run redlock.WithRestartGuard
	resources   int           // resources the workers compete for (default 2)
	loops       int           // goroutines per worker (default 1)
	workers     int           // worker processes (default Config.Workers)
	longHold    bool          // holds last most of the TTL, so that a holder is inside when the fault hits
	minTTL      time.Duration // a TTL at least this long: the fault takes that long to land

	prepare func(ctx context.Context, w *world) error                          // before the masters start
	server  func(w *world, i int) redisserver.Options                          // master i's options
	inject  func(ctx context.Context, w *world) (fault, error)                 // the fault, begun and ended
	judge   func(cfg Config, runs []result, r *Row, fail func(string, ...any)) // the scenario's own bounds
}

func (sc *scenario) sizeFor(cfg Config) size {
	s := size{workers: cfg.Workers, loops: 1, resources: 2, ttl: cfg.TTL, hold: 50 * time.Millisecond}
	if !cfg.Quick {
		s.hold, s.resources, s.steady = 100*time.Millisecond, 4, 2*time.Second
	}
	if sc.workers != 0 {
		s.workers = sc.workers
	}
	if sc.loops != 0 {
		s.loops = sc.loops
	}
	if sc.resources != 0 {
		s.resources = sc.resources
	}
	s.ttl = max(s.ttl, sc.minTTL)
	if sc.longHold {
		s.hold = s.ttl * 7 / 10
	}
	return s
}

func (sc *scenario) serverOptions(w *world, i int) redisserver.Options {
	if sc.server == nil {
		return redisserver.Options{}
	}
	return sc.server(w, i)
}

// scenarios, in the order the suite runs them.
var scenarios []*scenario

func init() {
	scenarios = []*scenario{
		{name: "holder-pause", about: "the holder is SIGSTOPped past its TTL mid-critical-section, then resumed",
			mustObserve: true, resources: 1, inject: holderPause},
		{name: "holder-kill", about: "the holder is SIGKILLed mid-critical-section; the next worker gets the lock within TTL plus one attempt",
			resources: 1, inject: holderKill, judge: judgeHolderKill},
		{name: "minority-down", about: "2 of 5 masters killed mid-run and restarted: service continues",
			inject: mastersDown(3, 4), judge: judgeMinorityDown},
		{name: "majority-down", about: "3 of 5 masters killed: quorum unavailable within one node timeout; service resumes when they return",
			inject: mastersDown(0, 1, 2), judge: judgeMajorityDown},
		{name: "restart-no-persistence", about: "a master holding a 3-of-5 lock restarts empty while contenders retry",
			mustObserve: true, resources: 1, longHold: true, inject: restartNoPersistence},
		{name: "restart-no-persistence-guarded", about: "restart-no-persistence with the clients' restart guard on: no overlap",
			guard: true, resources: 1, longHold: true, inject: restartNoPersistence, judge: judgeGuarded},
		{name: "counter-loss", about: "the fence counter restarts empty mid-run",
			inject: counterLoss, judge: judgeCounterLoss},
		{name: "master-clock-jump", variant: "redis-server+clockshim", about: "the clocks of 3 of 5 masters jump forward by a TTL while a holder is inside",
			mustObserve: true, resources: 1, longHold: true, prepare: clockPrepare, server: clockServer, inject: clockJump, judge: judgeClockJump},
		{name: "slow-master", about: "one master slower than the node timeout, through a proxy",
			proxied: true, inject: proxyFault("slow"), judge: judgeNoErrors},
		{name: "blackholed-master", about: "one master stops answering, through a proxy",
			proxied: true, inject: proxyFault("blackhole"), judge: judgeNoErrors},
		{name: "paused-master-ghost", about: "a master is SIGSTOPped with SETs in flight and resumed: late SETs apply",
			inject: pausedMasterGhost, judge: judgeGhost},
		{name: "failover", variant: "sentinel", about: "a master's primary dies before its replica got our key; Sentinel promotes the replica",
			mustObserve: true, resources: 1, longHold: true, minTTL: 5 * time.Second, prepare: failoverPrepare, inject: failover},
		{name: "partition", variant: "netns", about: "the client cut off from 3 of 5 masters (network namespaces, iptables DROP), then healed",
			prepare: partitionPrepare, server: partitionServer, inject: partition, judge: judgePartition},
		{name: "overload", about: "3 of 5 masters slower than the node timeout under many workers, then healed",
			proxied: true, loops: 8, inject: overload, judge: judgeOverload},
	}
}

// Names returns the scenarios' names in the order the suite runs them.
func Names() []string {
	var out []string
	for _, sc := range scenarios {
		out = append(out, sc.name)
	}
	return out
}

// About returns one line on each scenario, for a usage text.
func About() string {
	var b strings.Builder
	for _, sc := range scenarios {
		fmt.Fprintf(&b, "  %-31s %s\n", sc.name, sc.about)
	}
	return b.String()
}

func find(name string) *scenario {
	for _, sc := range scenarios {
		if sc.name == name {
			return sc
		}
	}
	return nil
}

// --- process faults on the holder ---

// holderPause stops the worker that just claimed a row, for 1.5 TTLs, and resumes it: it
// wakes inside its critical section and writes, late.
func holderPause(ctx context.Context, w *world) (fault, error) {
	op, err := w.rec.claimed(ctx, time.Now(), nil)
	if err != nil {
		return fault{}, err
	}
	wp := w.workers[op.Worker]
	f := fault{start: time.Now(), resource: op.Resource}
	if err := syscall.Kill(wp.pid(), syscall.SIGSTOP); err != nil {
		return f, err
	}
	f.injected = waitUntil(time.Second, func() bool { return childproc.Stopped(wp.pid()) })
	time.Sleep(w.size.ttl * 3 / 2)
	f.injected = f.injected && childproc.Stopped(wp.pid())
	if err := syscall.Kill(wp.pid(), syscall.SIGCONT); err != nil {
		return f, err
	}
	f.end = time.Now()
	return f, nil
}

// holderKill kills the worker that just claimed a row.
func holderKill(ctx context.Context, w *world) (fault, error) {
	op, err := w.rec.claimed(ctx, time.Now(), nil)
	if err != nil {
		return fault{}, err
	}
	wp := w.workers[op.Worker]
	f := fault{start: time.Now(), resource: op.Resource}
	wp.kill()
	f.end = f.start
	f.injected = wp.exited()
	return f, nil
}

// judgeHolderKill: the testing matrix's bound, the TTL plus one attempt (the longest retry
// pause and a round of node timeouts), with room for the machine.
func judgeHolderKill(cfg Config, runs []result, r *Row, fail func(string, ...any)) {
	bound := cfg.TTL + cfg.Retry + 2*cfg.NodeTimeout + slack(cfg)
	if r.RecoveryMs < 0 || r.RecoveryMs > ms(bound) {
		fail("next holder after %.0f ms, bound %v", r.RecoveryMs, bound)
	}
}

// --- master faults ---

// mastersDown kills the masters named, keeps them down for 1.5 s and at least a TTL (so that
// locks won before cannot be won again on restarted empty masters: the restart-no-persistence
// case is its own scenario), and restarts them.
func mastersDown(idx ...int) func(context.Context, *world) (fault, error) {
	return func(ctx context.Context, w *world) (fault, error) {
		f := fault{start: time.Now(), injected: true}
		for _, i := range idx {
			if err := w.servers[i].Kill(); err != nil {
				return f, err
			}
			f.injected = f.injected && portClosed(w.direct[i])
		}
		time.Sleep(max(1500*time.Millisecond, w.size.ttl+200*time.Millisecond))
		for _, i := range idx {
			if err := w.servers[i].Restart(ctx); err != nil {
				return f, err
			}
		}
		f.end = time.Now()
		return f, nil
	}
}

// spare is how many attempts may miss a quorum where the fault alone cannot
// cause it: a loaded machine under -race makes a healthy master miss the
// node timeout now and then (one in 107 attempts once, healthy p50 5 ms).
func spare(r *Row) int { return max(1, r.Acquisitions/50) }

func judgeMinorityDown(cfg Config, runs []result, r *Row, fail func(string, ...any)) {
	if r.Unavailable > spare(r) || r.Errors != 0 {
		fail("%d attempts found no quorum and %d failed with 2 of 5 masters down", r.Unavailable, r.Errors)
	}
	judgeRestartRecovery(cfg, r, fail)
}

func judgeMajorityDown(cfg Config, runs []result, r *Row, fail func(string, ...any)) {
	if r.Unavailable == 0 {
		fail("no attempt reported the quorum unavailable with 3 of 5 masters down")
	}
	if bound := cfg.NodeTimeout + slack(cfg); r.UnavailableP99Ms > ms(bound) {
		fail("quorum unavailable after %.1f ms (p99), bound %v", r.UnavailableP99Ms, bound)
	}
	judgeRestartRecovery(cfg, r, fail)
}

// judgeRecovery: the first lock after the heal within a second (the breaker's probe, one
// retry), plus room for the machine.
func judgeRecovery(cfg Config, r *Row, fail func(string, ...any)) {
	within(time.Second+slack(cfg), r, fail)
}

// judgeRestartRecovery: after a server restart, a second more. go-redis's pool stops dialling
// a server after PoolSize failed dials in a row and probes it once a second in the background
// (internal/pool tryDial), so a client sees a restarted server up to a second late.
func judgeRestartRecovery(cfg Config, r *Row, fail func(string, ...any)) {
	within(2*time.Second+slack(cfg), r, fail)
}

func within(bound time.Duration, r *Row, fail func(string, ...any)) {
	if r.RecoveryMs < 0 || r.RecoveryMs > ms(bound) {
		fail("no lock within %v of the fault's end (recovery %.0f ms)", bound, r.RecoveryMs)
	}
}

// restartNoPersistence makes the unsafe case of the Redis spec happen: masters 3 and 4 are
// down, so a holder's lock lives on masters 0, 1 and 2 only; master 2 restarts empty and 3 and
// 4 come back empty, and a contender wins 2, 3 and 4 while the holder is still inside.
func restartNoPersistence(ctx context.Context, w *world) (fault, error) {
	f := fault{start: time.Now(), injected: true}
	for _, i := range []int{3, 4} {
		if err := w.servers[i].Kill(); err != nil {
			return f, err
		}
	}
	// A claim after the masters were found down: its lock cannot be on them.
	op, err := w.rec.claimed(ctx, time.Now().Add(2*w.cfg.NodeTimeout), nil)
	if err != nil {
		return f, err
	}
	f.resource = op.Resource
	before, err := runID(ctx, w.direct[2])
	if err != nil {
		return f, err
	}
	if err := w.servers[2].Kill(); err != nil {
		return f, err
	}
	for _, i := range []int{2, 3, 4} {
		if err := w.servers[i].Restart(ctx); err != nil {
			return f, err
		}
	}
	// A new run_id: the server that held the key is gone, and its successor started empty.
	after, err := runID(ctx, w.direct[2])
	f.injected = err == nil && after != before
	f.end = time.Now()
	return f, err
}

// judgeGuarded: the restarted masters do not count until a TTL has passed since their
// restart, so the contender finds no quorum while the holder is inside.
func judgeGuarded(cfg Config, runs []result, r *Row, fail func(string, ...any)) {
	if r.LockOverlaps != 0 {
		fail("%d lock overlaps with the restart guard on", r.LockOverlaps)
	}
}

// counterLoss kills the fence counter, keeps it down 300 ms (locks are refused: no fence),
// and restarts it empty.
func counterLoss(ctx context.Context, w *world) (fault, error) {
	before, err := runID(ctx, w.counter.Addr())
	if err != nil {
		return fault{}, err
	}
	f := fault{start: time.Now()}
	if err := w.counter.Kill(); err != nil {
		return f, err
	}
	closed := portClosed(w.counter.Addr())
	time.Sleep(300 * time.Millisecond)
	if err := w.counter.Restart(ctx); err != nil {
		return f, err
	}
	f.end = time.Now()
	after, err := runID(ctx, w.counter.Addr())
	f.injected = closed && err == nil && after != before
	return f, err
}

func judgeCounterLoss(cfg Config, runs []result, r *Row, fail func(string, ...any)) {
	if r.FenceUnavailable == 0 {
		fail("no lock was refused for want of a fence while the counter was down")
	}
	judgeRestartRecovery(cfg, r, fail)
}

// proxyFault makes master 0 slow (twice the node timeout) or blackholed for 2 s, then heals.
func proxyFault(kind string) func(context.Context, *world) (fault, error) {
	return func(ctx context.Context, w *world) (fault, error) {
		p := w.proxies[0]
		f := fault{start: time.Now()}
		if kind == "slow" {
			p.SetDelay(2 * w.cfg.NodeTimeout)
		} else {
			p.Hang()
		}
		f.injected = proxyFaulty(ctx, p.Addr(), w.cfg.NodeTimeout)
		time.Sleep(2 * time.Second)
		if err := p.Heal(); err != nil {
			return f, err
		}
		f.end = time.Now()
		return f, nil
	}
}

// proxyFaulty reports whether a PING through the proxy at addr misses the node timeout.
func proxyFaulty(ctx context.Context, addr string, nodeTimeout time.Duration) bool {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: nodeTimeout, ReadTimeout: nodeTimeout, WriteTimeout: nodeTimeout})
	defer c.Close()
	return c.Ping(ctx).Err() != nil
}

// judgeNoErrors: with 4 of 5 masters healthy, no attempt may fail with an error, and no more
// than the spare may find no quorum.
func judgeNoErrors(cfg Config, runs []result, r *Row, fail func(string, ...any)) {
	if r.Unavailable > spare(r) || r.Errors != 0 {
		fail("%d attempts found no quorum and %d failed with one master faulty", r.Unavailable, r.Errors)
	}
}

// pausedMasterGhost stops master 0 for 1 s while the workers take locks, resumes it, and looks
// at the lock keys it holds then: a SET that arrived while it was stopped is applied late, for
// a holder that has long given up on it.
func pausedMasterGhost(ctx context.Context, w *world) (fault, error) {
	srv := w.servers[0]
	f := fault{start: time.Now()}
	if err := srv.Pause(); err != nil {
		return f, err
	}
	f.injected = childproc.Stopped(srv.Pid())
	time.Sleep(time.Second)
	if err := srv.Resume(); err != nil {
		return f, err
	}
	f.end = time.Now()
	time.Sleep(20 * time.Millisecond) // what was queued is applied
	c := redis.NewClient(&redis.Options{Addr: w.direct[0], MaxRetries: -1})
	defer c.Close()
	keys, err := c.Keys(ctx, "lock:*").Result()
	if err != nil {
		return f, err
	}
	time.Sleep(50 * time.Millisecond) // the workers' hold events for these keys arrive
	w.rec.mu.Lock()
	defer w.rec.mu.Unlock()
	for _, k := range keys {
		tok, err := c.Get(ctx, k).Result()
		if err != nil {
			continue
		}
		if h, ok := w.rec.holdings[tok]; ok && h.Released == 0 {
			continue // a live holder's key
		}
		ttl, err := c.PTTL(ctx, k).Result()
		if err != nil || ttl < 0 {
			continue
		}
		f.ghosts++
		f.ghostTTL = max(f.ghostTTL, ttl)
	}
	return f, nil
}

// judgeGhost: a ghost key never outlives one TTL.
func judgeGhost(cfg Config, runs []result, r *Row, fail func(string, ...any)) {
	if r.GhostTTLMs > ms(cfg.TTL) {
		fail("a ghost key lives %.0f ms, longer than the TTL", r.GhostTTLMs)
	}
	judgeRecovery(cfg, r, fail)
}

// overload makes masters 0, 1 and 2 slower than the node timeout for 2 s, with 8 goroutines
// in each worker, then heals them.
func overload(ctx context.Context, w *world) (fault, error) {
	f := fault{start: time.Now(), injected: true}
	for _, i := range []int{0, 1, 2} {
		w.proxies[i].SetDelay(3 * w.cfg.NodeTimeout)
		f.injected = f.injected && proxyFaulty(ctx, w.proxies[i].Addr(), w.cfg.NodeTimeout)
	}
	time.Sleep(2 * time.Second)
	for _, i := range []int{0, 1, 2} {
		if err := w.proxies[i].Heal(); err != nil {
			return f, err
		}
	}
	f.end = time.Now()
	return f, nil
}

// judgeOverload: service back within a second of the heal; the workers' goroutines bounded by
// what docs/design.md gives for a hung master (the pool's connections, one node timeout's calls
// and releases), here generously: 64 per goroutine taking locks plus the runtime's own.
func judgeOverload(cfg Config, runs []result, r *Row, fail func(string, ...any)) {
	judgeRecovery(cfg, r, fail)
	if bound := 64*8 + 100; r.PeakGoroutines > bound {
		fail("a worker peaked at %d goroutines, bound %d", r.PeakGoroutines, bound)
	}
	if r.Unavailable == 0 {
		fail("no attempt found the quorum unavailable: the overload did not bite")
	}
}

// slack is room for a loaded machine in the scenarios' time bounds: the race detector makes
// the workers 5-10 times slower.
func slack(cfg Config) time.Duration {
	if cfg.Quick {
		return 500 * time.Millisecond
	}
	return 250 * time.Millisecond
}

// waitUntil polls cond every millisecond for at most d.
func waitUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// --- network partition ---

// partitionPrepare puts each master in a network namespace of its own.
func partitionPrepare(ctx context.Context, w *world) error {
	w.hosts = make([]*netns.Host, w.cfg.Masters)
	for i := range w.hosts {
		h, err := netns.New(ctx)
		if errors.Is(err, netns.ErrNotRoot) || errors.Is(err, netns.ErrNoIptables) {
			return &skipError{err}
		}
		if err != nil {
			return err
		}
		// Registered before the servers start, so it runs after they stop: a namespace
		// with a process inside cannot be deleted.
		w.addCleanup(func() { _ = h.Close() })
		w.hosts[i] = h
	}
	return nil
}

func partitionServer(w *world, i int) redisserver.Options {
	h := w.hosts[i]
	// Redis's protected mode refuses clients from outside loopback, and the host is outside.
	return redisserver.Options{Host: h.Addr(), Wrap: h.Wrap(), Args: []string{"--protected-mode", "no"}}
}

// partition cuts the client off from masters 0, 1 and 2 for 1.5 s (packets dropped, so
// calls hang), then heals.
func partition(ctx context.Context, w *world) (fault, error) {
	f := fault{start: time.Now(), injected: true}
	for _, i := range []int{0, 1, 2} {
		if err := w.hosts[i].Partition(ctx); err != nil {
			return f, err
		}
		f.injected = f.injected && proxyFaulty(ctx, w.direct[i], w.cfg.NodeTimeout)
	}
	time.Sleep(1500 * time.Millisecond)
	for _, i := range []int{0, 1, 2} {
		if err := w.hosts[i].Heal(ctx); err != nil {
			return f, err
		}
	}
	f.end = time.Now()
	return f, nil
}

func judgePartition(cfg Config, runs []result, r *Row, fail func(string, ...any)) {
	if r.Unavailable == 0 {
		fail("no attempt found the quorum unavailable while a majority was cut off")
	}
	judgeRecovery(cfg, r, fail)
}

// --- a master's clock ---

// clockPrepare gives masters 0, 1 and 2 a wall clock the run can move.
func clockPrepare(ctx context.Context, w *world) error {
	for i := range 3 {
		dir := filepath.Join(w.dir, fmt.Sprintf("clock%d", i))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		c, err := clockshim.New(ctx, dir)
		if err != nil {
			return err
		}
		w.addCleanup(func() { _ = c.Close() })
		w.clocks = append(w.clocks, c)
	}
	return nil
}

func clockServer(w *world, i int) redisserver.Options {
	if i < len(w.clocks) {
		return redisserver.Options{Env: w.clocks[i].Env()}
	}
	return redisserver.Options{}
}

// clockJump steps the clocks of masters 0, 1 and 2 forward by a TTL while a holder is inside:
// the key expires on a majority at once, and a contender wins it. A client of the coordinator's
// own, with the clock monitor on (warnings only, so the workers' lock is the lock alone), watches
// every master and counts the jumps it reports.
func clockJump(ctx context.Context, w *world) (fault, error) {
	mon, err := startClockMonitor(w)
	if err != nil {
		return fault{}, err
	}
	defer mon.close()
	time.Sleep(3 * mon.interval) // samples before the jump to measure it from
	op, err := w.rec.claimed(ctx, time.Now(), nil)
	if err != nil {
		return fault{}, err
	}
	f := fault{start: time.Now(), resource: op.Resource}
	before, err := serverTime(ctx, w.direct[0])
	if err != nil {
		return f, err
	}
	for _, c := range w.clocks {
		c.Jump(w.size.ttl)
	}
	after, err := serverTime(ctx, w.direct[0])
	f.injected = err == nil && after.Sub(before) >= w.size.ttl
	f.end = time.Now()
	// A jump is told at the second sample after it.
	waitUntil(20*mon.interval, func() bool { return mon.jumps.Load() >= int64(len(w.clocks)) || ctx.Err() != nil })
	f.clockJumps = int(mon.jumps.Load())
	return f, err
}

// clockMonitor is a redlock client that only watches the masters' clocks.
type clockMonitor struct {
	interval time.Duration
	jumps    atomic.Int64
	client   *redlock.Client
	conns    []*redis.Client
}

func (m *clockMonitor) RenewalFailed(string, error)             {}
func (m *clockMonitor) MasterDrift(string, float64)             {}
func (m *clockMonitor) MasterClockJumped(string, time.Duration) { m.jumps.Add(1) }

var _ redlock.DriftObserver = (*clockMonitor)(nil)

func startClockMonitor(w *world) (*clockMonitor, error) {
	m := &clockMonitor{interval: max(guardInterval, w.cfg.NodeTimeout)}
	masters := make([]redlock.Master, len(w.direct))
	for i, a := range w.direct {
		c := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1})
		m.conns, masters[i] = append(m.conns, c), c
	}
	c, err := redlock.New(masters, redlock.WithNodeTimeout(w.cfg.NodeTimeout), redlock.WithObserver(m),
		redlock.WithClockMonitor(m.interval, false))
	if err != nil {
		m.close()
		return nil, err
	}
	m.client = c
	return m, nil
}

func (m *clockMonitor) close() {
	if m.client != nil {
		_ = m.client.Close()
	}
	for _, c := range m.conns {
		_ = c.Close()
	}
}

// judgeClockJump: the clock monitor told at least as many jumps as were made, summed over the
// runs; which master each report named is not checked.
func judgeClockJump(cfg Config, runs []result, r *Row, fail func(string, ...any)) {
	if want := 3 * len(runs); r.ClockJumpsDetected < want {
		fail("the clock monitor caught %d of %d clock jumps", r.ClockJumpsDetected, want)
	}
}

// serverTime is the Redis server's TIME.
func serverTime(ctx context.Context, addr string) (time.Time, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	return c.Time(ctx).Result()
}

// --- a failover to a replica that lacks the key ---

// failoverPrepare makes master 0 a primary with a replica under Sentinel; the workers reach it
// through Sentinel.
func failoverPrepare(ctx context.Context, w *world) error {
	g, err := sentinel.Start(ctx, sentinel.Options{})
	if err != nil {
		return err
	}
	w.addCleanup(func() { _ = g.Stop() })
	w.group = g
	w.servers = make([]*redisserver.Server, w.cfg.Masters)
	w.masters = make([]master, w.cfg.Masters)
	w.direct = make([]string, w.cfg.Masters) // "": the majority check does not ask master 0
	w.masters[0] = master{Sentinels: g.SentinelAddrs(), Name: g.MasterName()}
	return nil
}

// failover makes a lock live on masters 0, 1 and 2 only (3 and 4 down), with master 0's
// replica holding back replication; kills master 0's primary, waits for Sentinel to promote
// the replica, which lacks the key, and brings 3 and 4 back empty: a contender can win 0, 3
// and 4 while the holder is inside.
func failover(ctx context.Context, w *world) (fault, error) {
	f := fault{start: time.Now()}
	for _, i := range []int{3, 4} {
		if err := w.servers[i].Kill(); err != nil {
			return f, err
		}
	}
	if err := w.group.PauseReplication(ctx); err != nil {
		return f, err
	}
	op, err := w.rec.claimed(ctx, time.Now().Add(2*w.cfg.NodeTimeout), nil)
	if err != nil {
		return f, err
	}
	f.resource = op.Resource
	h, ok := w.rec.holder(op.Worker, op.Resource)
	if !ok {
		return f, fmt.Errorf("no live holding for worker %d's claim on %s", op.Worker, op.Resource)
	}
	if err := w.group.KillPrimary(ctx); err != nil {
		return f, err
	}
	primary, err := w.group.WaitFailover(ctx)
	if err != nil {
		return f, err
	}
	c := redis.NewClient(&redis.Options{Addr: primary, MaxRetries: -1})
	tok, err := c.Get(ctx, "lock:"+op.Resource).Result()
	c.Close()
	// Verified: the promoted replica does not hold the holder's key.
	f.injected = (err == nil && tok != h.Token) || errors.Is(err, redis.Nil)
	for _, i := range []int{3, 4} {
		if err := w.servers[i].Restart(ctx); err != nil {
			return f, err
		}
	}
	f.end = time.Now()
	return f, nil
}
