package chaos

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"quorumlock.dev/cmd/redlock-bench/internal/chaosreport"
	"quorumlock.dev/internal/harness/childproc"
)

// A master paused with SETs in flight: the SETs apply when it resumes, for holders that have
// long given up on them.

var pausedMasterGhost = &scenario{
	name: "paused-master-ghost", about: "a master is SIGSTOPped with SETs in flight and resumed: late SETs apply",
	fault: func() injector { return pauseMaster{} }, judge: judgeGhost,
}

// pauseMaster stops master 0 for 1 s while the workers take locks, resumes it, and looks at
// the lock keys it holds then: a SET that arrived while it was stopped is applied late, for a
// holder that has long given up on it.
type pauseMaster struct{ plainMasters }

func (pauseMaster) inject(ctx context.Context, w *world) (chaosreport.Fault, error) {
	srv := w.Servers[0]
	f := chaosreport.Fault{Start: time.Now()}
	if err := srv.Pause(); err != nil {
		return f, err
	}
	f.Injected = childproc.Stopped(srv.Pid())
	time.Sleep(time.Second)
	if err := srv.Resume(); err != nil {
		return f, err
	}
	f.End = time.Now()
	time.Sleep(20 * time.Millisecond) // what was queued is applied
	c := redis.NewClient(&redis.Options{Addr: w.Direct[0], MaxRetries: -1})
	defer c.Close()
	keys, err := c.Keys(ctx, "lock:*").Result()
	if err != nil {
		return f, err
	}
	time.Sleep(50 * time.Millisecond) // the workers' hold events for these keys arrive
	live := w.Rec.Live()
	for _, k := range keys {
		tok, err := c.Get(ctx, k).Result()
		if err != nil {
			continue
		}
		if live[tok] {
			continue // a live holder's key
		}
		ttl, err := c.PTTL(ctx, k).Result()
		if err != nil || ttl < 0 {
			continue
		}
		f.Ghosts++
		f.GhostTTL = max(f.GhostTTL, ttl)
	}
	return f, nil
}

// judgeGhost: a ghost key never outlives one TTL.
func judgeGhost(cfg Config, runs []chaosreport.Run, r *Row, fail func(string, ...any)) {
	if r.GhostTTLMs > chaosreport.Ms(cfg.TTL) {
		fail("a ghost key lives %.0f ms, longer than the TTL", r.GhostTTLMs)
	}
	judgeRecovery(cfg, r, fail)
}
