package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"quorumlock.dev/cmd/redlock-bench/internal/chaosreport"
	"quorumlock.dev/cmd/redlock-bench/internal/chaosworker"
	"quorumlock.dev/cmd/redlock-bench/internal/chaosworld"
	"quorumlock.dev/internal/harness/clockshim"
	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/redlock"

	"quorumlock.dev/driver"

	"quorumlock.dev/driver/goredis"
)

// A master's clock: the wall clocks of a majority jump forward while a holder is inside.

var masterClockJump = &scenario{
	name: "master-clock-jump", variant: "redis-server+clockshim", about: "the clocks of 3 of 5 masters jump forward by a TTL while a holder is inside",
	mustObserve: true, resources: 1, longHold: true, fault: func() injector { return &clockJump{} }, judge: judgeClockJump,
}

// clockJump steps the clocks of masters 0, 1 and 2 forward by a TTL while a holder is inside:
// the key expires on a majority at once, and a contender wins it. A client of the coordinator's
// own, with the clock monitor on (warnings only, so the workers' lock is the lock alone), watches
// every master and counts the jumps it reports.
type clockJump struct {
	clocks []*clockshim.Clock // the wall clocks of masters 0, 1 and 2
}

// prepare gives masters 0, 1 and 2 a wall clock the run can move.
func (j *clockJump) prepare(ctx context.Context, w *world) error {
	for i := range 3 {
		dir := filepath.Join(w.Dir, fmt.Sprintf("clock%d", i))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		c, err := clockshim.New(ctx, dir)
		if err != nil {
			return err
		}
		w.AddCleanup(func() { _ = c.Close() })
		j.clocks = append(j.clocks, c)
	}
	return nil
}

func (j *clockJump) server(i int) redisserver.Options {
	if i < len(j.clocks) {
		return redisserver.Options{Env: j.clocks[i].Env()}
	}
	return redisserver.Options{}
}

func (j *clockJump) inject(ctx context.Context, w *world) (chaosreport.Fault, error) {
	mon, err := startClockMonitor(w)
	if err != nil {
		return chaosreport.Fault{}, err
	}
	defer mon.close()
	time.Sleep(3 * mon.interval) // samples before the jump to measure it from
	op, err := w.Rec.Claimed(ctx, time.Now(), nil)
	if err != nil {
		return chaosreport.Fault{}, err
	}
	f := chaosreport.Fault{Start: time.Now(), Resource: op.Resource}
	before, err := chaosworld.ServerTime(ctx, w.Direct[0])
	if err != nil {
		return f, err
	}
	for _, c := range j.clocks {
		c.Jump(w.size.ttl)
	}
	after, err := chaosworld.ServerTime(ctx, w.Direct[0])
	f.Injected = err == nil && after.Sub(before) >= w.size.ttl
	f.End = time.Now()
	// A jump is told at the second sample after it.
	chaosworld.WaitUntil(20*mon.interval, func() bool { return mon.jumps.Load() >= int64(len(j.clocks)) || ctx.Err() != nil })
	f.ClockJumps = int(mon.jumps.Load())
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

func startClockMonitor(w *world) (*clockMonitor, error) {
	m := &clockMonitor{interval: max(chaosworker.GuardInterval, w.cfg.NodeTimeout)}
	masters := make([]driver.Conn, len(w.Direct))
	for i, a := range w.Direct {
		c := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1})
		m.conns, masters[i] = append(m.conns, c), goredis.Conn(c)
	}
	c, err := redlock.New(masters, redlock.WithNodeTimeout(w.cfg.NodeTimeout), redlock.WithHooks(redlock.Hooks{MasterClockJumped: m.MasterClockJumped}),
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
func judgeClockJump(cfg Config, runs []chaosreport.Run, r *Row, fail func(string, ...any)) {
	if want := 3 * len(runs); r.ClockJumpsDetected < want {
		fail("the clock monitor caught %d of %d clock jumps", r.ClockJumpsDetected, want)
	}
}
