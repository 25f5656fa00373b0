package chaos

import (
	"context"
	"fmt"
	"strings"
	"time"

	"quorumlock.dev/cmd/redlock-bench/internal/chaosreport"
	"quorumlock.dev/internal/harness/redisserver"
)

// scenario is one way a Redis lock fails, and what must hold while it does. Its fault is made
// fresh for each run and holds what that run's fault needs (namespaces, clocks, a Sentinel
// group); the world holds what every run has.
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

	leader        bool // the workers are outbox relays electing a leader for one role (leader.go)
	resignEvery   int  // a leader resigns after this many deliveries (0: never)
	workerProxies bool // each worker reaches the masters through fault proxies of its own

	fault func() injector                                                             // one run's fault
	judge func(cfg Config, runs []chaosreport.Run, r *Row, fail func(string, ...any)) // the scenario's own bounds
}

// injector is one run's fault: what it sets up before the masters start, how it starts master
// i, and the fault itself, begun, verified and ended.
type injector interface {
	prepare(ctx context.Context, w *world) error
	server(i int) redisserver.Options
	inject(ctx context.Context, w *world) (chaosreport.Fault, error)
}

// plainMasters is an injector's first two steps for a fault that needs nothing before the
// masters start and plain redis-servers on loopback.
type plainMasters struct{}

func (plainMasters) prepare(context.Context, *world) error { return nil }
func (plainMasters) server(int) redisserver.Options        { return redisserver.Options{} }

// scenarios, in the order the suite runs them; each is declared in its family's file.
var scenarios = []*scenario{
	holderPause, holderKill,
	minorityDown, majorityDown,
	restartNoPersistence, restartNoPersistenceGuarded, counterLoss,
	masterClockJump,
	slowMaster, blackholedMaster,
	pausedMasterGhost,
	failover,
	partition,
	overload,
	leaderPause, leaderKill, leaderPartition, leaderResign,
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

// spare is how many attempts may miss a quorum where the fault alone cannot
// cause it: a loaded machine under -race makes healthy masters miss the
// node timeout now and then (3 in 131 once with one core kept busy beside
// the suite, healthy p50 22 ms). A fault that did cost the quorum costs
// dozens in the 2 s it lasts.
func spare(r *Row) int { return max(2, r.Acquisitions/25) }

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
	if r.RecoveryMs < 0 || r.RecoveryMs > chaosreport.Ms(bound) {
		fail("no lock within %v of the fault's end (recovery %.0f ms)", bound, r.RecoveryMs)
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
