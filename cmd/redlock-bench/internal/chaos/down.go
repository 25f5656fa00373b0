package chaos

import (
	"context"
	"time"

	"quorumlock.dev/cmd/redlock-bench/internal/chaosreport"
	"quorumlock.dev/cmd/redlock-bench/internal/chaosworld"
)

// Masters killed and restarted: a minority (service goes on) or a majority (quorum unavailable).

var minorityDown = &scenario{
	name: "minority-down", about: "2 of 5 masters killed mid-run and restarted: service continues",
	fault: func() injector { return mastersDown{idx: []int{3, 4}} }, judge: judgeMinorityDown,
}

var majorityDown = &scenario{
	name: "majority-down", about: "3 of 5 masters killed: quorum unavailable within one node timeout; service resumes when they return",
	fault: func() injector { return mastersDown{idx: []int{0, 1, 2}} }, judge: judgeMajorityDown,
}

// mastersDown kills the masters idx, keeps them down for 1.5 s and at least a TTL (so that
// locks won before cannot be won again on restarted empty masters: the restart-no-persistence
// case is its own scenario), and restarts them.
type mastersDown struct {
	plainMasters
	idx []int
}

func (d mastersDown) inject(ctx context.Context, w *world) (chaosreport.Fault, error) {
	f := chaosreport.Fault{Start: time.Now(), Injected: true}
	for _, i := range d.idx {
		if err := w.Servers[i].Kill(); err != nil {
			return f, err
		}
		f.Injected = f.Injected && chaosworld.PortClosed(w.Direct[i])
	}
	time.Sleep(max(1500*time.Millisecond, w.size.ttl+200*time.Millisecond))
	for _, i := range d.idx {
		if err := w.Servers[i].Restart(ctx); err != nil {
			return f, err
		}
	}
	f.End = time.Now()
	return f, nil
}

func judgeMinorityDown(cfg Config, runs []chaosreport.Run, r *Row, fail func(string, ...any)) {
	if r.Unavailable > spare(r) || r.Errors != 0 {
		fail("%d attempts found no quorum and %d failed with 2 of 5 masters down", r.Unavailable, r.Errors)
	}
	judgeRestartRecovery(cfg, r, fail)
}

func judgeMajorityDown(cfg Config, runs []chaosreport.Run, r *Row, fail func(string, ...any)) {
	if r.Unavailable == 0 {
		fail("no attempt reported the quorum unavailable with 3 of 5 masters down")
	}
	if bound := cfg.NodeTimeout + slack(cfg); r.UnavailableP99Ms > chaosreport.Ms(bound) {
		fail("quorum unavailable after %.1f ms (p99), bound %v", r.UnavailableP99Ms, bound)
	}
	judgeRestartRecovery(cfg, r, fail)
}
