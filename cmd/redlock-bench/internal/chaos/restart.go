package chaos

import (
	"context"
	"time"

	"quorumlock.dev/cmd/redlock-bench/internal/chaosreport"
	"quorumlock.dev/cmd/redlock-bench/internal/chaosworld"
)

// Servers that restart empty, without persistence: a master holding a lock, with and without
// the clients' restart guard, and the fence counter.

var restartNoPersistence = &scenario{
	name: "restart-no-persistence", about: "a master holding a 3-of-5 lock restarts empty while contenders retry",
	mustObserve: true, resources: 1, longHold: true, minTTL: restartTTL, fault: func() injector { return restartEmpty{} },
}

var restartNoPersistenceGuarded = &scenario{
	name: "restart-no-persistence-guarded", about: "restart-no-persistence with the clients' restart guard on: no overlap",
	guard: true, resources: 1, longHold: true, minTTL: restartTTL, fault: func() injector { return restartEmpty{} }, judge: judgeGuarded,
}

// restartTTL: the holder must still be inside when three restarted masters answer the
// contenders. Restarting them takes a few hundred ms on a loaded machine, and a go-redis pool
// that failed its dials to a down server dials it again up to a second later; a quick run's
// 1 s TTL (a 700 ms hold) left too little of the hold for that, and a run under CI once ended
// with only 8 locks and no overlap.
const restartTTL = 3 * time.Second

var counterLoss = &scenario{
	name: "counter-loss", about: "the fence counter restarts empty mid-run",
	fault: func() injector { return loseCounter{} }, judge: judgeCounterLoss,
}

// restartEmpty makes the unsafe case of the Redis spec happen: masters 3 and 4 are down, so a
// holder's lock lives on masters 0, 1 and 2 only; master 2 restarts empty and 3 and 4 come
// back empty, and a contender wins 2, 3 and 4 while the holder is still inside.
type restartEmpty struct{ plainMasters }

func (restartEmpty) inject(ctx context.Context, w *world) (chaosreport.Fault, error) {
	f := chaosreport.Fault{Start: time.Now(), Injected: true}
	for _, i := range []int{3, 4} {
		if err := w.Servers[i].Kill(); err != nil {
			return f, err
		}
	}
	// A claim after the masters were found down: its lock cannot be on them.
	op, err := w.Rec.Claimed(ctx, time.Now().Add(2*w.cfg.NodeTimeout), nil)
	if err != nil {
		return f, err
	}
	f.Resource = op.Resource
	before, err := chaosworld.RunID(ctx, w.Direct[2])
	if err != nil {
		return f, err
	}
	if err := w.Servers[2].Kill(); err != nil {
		return f, err
	}
	for _, i := range []int{2, 3, 4} {
		if err := w.Servers[i].Restart(ctx); err != nil {
			return f, err
		}
	}
	// A new run_id: the server that held the key is gone, and its successor started empty.
	after, err := chaosworld.RunID(ctx, w.Direct[2])
	f.Injected = err == nil && after != before
	f.End = time.Now()
	return f, err
}

// judgeGuarded: the restarted masters do not count until a TTL has passed since their
// restart, so the contender finds no quorum while the holder is inside.
func judgeGuarded(cfg Config, runs []chaosreport.Run, r *Row, fail func(string, ...any)) {
	if r.LockOverlaps != 0 {
		fail("%d lock overlaps with the restart guard on", r.LockOverlaps)
	}
}

// loseCounter kills the fence counter, keeps it down 300 ms (locks are refused: no fence),
// and restarts it empty.
type loseCounter struct{ plainMasters }

func (loseCounter) inject(ctx context.Context, w *world) (chaosreport.Fault, error) {
	before, err := chaosworld.RunID(ctx, w.Counter.Addr())
	if err != nil {
		return chaosreport.Fault{}, err
	}
	f := chaosreport.Fault{Start: time.Now()}
	if err := w.Counter.Kill(); err != nil {
		return f, err
	}
	closed := chaosworld.PortClosed(w.Counter.Addr())
	time.Sleep(300 * time.Millisecond)
	if err := w.Counter.Restart(ctx); err != nil {
		return f, err
	}
	f.End = time.Now()
	after, err := chaosworld.RunID(ctx, w.Counter.Addr())
	f.Injected = closed && err == nil && after != before
	return f, err
}

func judgeCounterLoss(cfg Config, runs []chaosreport.Run, r *Row, fail func(string, ...any)) {
	if r.FenceUnavailable == 0 {
		fail("no lock was refused for want of a fence while the counter was down")
	}
	judgeRestartRecovery(cfg, r, fail)
}
