package chaos

import (
	"context"
	"time"

	"quorumlock.dev/cmd/redlock-bench/internal/chaosreport"
	"quorumlock.dev/cmd/redlock-bench/internal/chaosworld"
)

// Masters behind fault proxies that answer late or not at all: one slow, one blackholed, or a
// majority slow under many workers (overload).

var slowMaster = &scenario{
	name: "slow-master", about: "one master slower than the node timeout, through a proxy",
	proxied: true, fault: func() injector { return proxyFault{kind: "slow"} }, judge: judgeNoErrors,
}

var blackholedMaster = &scenario{
	name: "blackholed-master", about: "one master stops answering, through a proxy",
	proxied: true, fault: func() injector { return proxyFault{kind: "blackhole"} }, judge: judgeNoErrors,
}

var overload = &scenario{
	name: "overload", about: "3 of 5 masters slower than the node timeout under many workers, then healed",
	proxied: true, loops: 8, fault: func() injector { return slowMajority{} }, judge: judgeOverload,
}

// proxyFault makes master 0 slow (twice the node timeout) or blackholed for 2 s, then heals.
type proxyFault struct {
	plainMasters
	kind string // slow or blackhole
}

func (pf proxyFault) inject(ctx context.Context, w *world) (chaosreport.Fault, error) {
	p := w.Proxies[0]
	f := chaosreport.Fault{Start: time.Now()}
	if pf.kind == "slow" {
		p.SetDelay(2 * w.cfg.NodeTimeout)
	} else {
		p.Hang()
	}
	f.Injected = chaosworld.Unresponsive(ctx, p.Addr(), w.cfg.NodeTimeout)
	time.Sleep(2 * time.Second)
	if err := p.Heal(); err != nil {
		return f, err
	}
	f.End = time.Now()
	return f, nil
}

// judgeNoErrors: with 4 of 5 masters healthy, no attempt may fail with an error, and no more
// than the spare may find no quorum.
func judgeNoErrors(cfg Config, runs []chaosreport.Run, r *Row, fail func(string, ...any)) {
	if r.Unavailable > spare(r) || r.Errors != 0 {
		fail("%d attempts found no quorum and %d failed with one master faulty", r.Unavailable, r.Errors)
	}
}

// slowMajority makes masters 0, 1 and 2 slower than the node timeout for 2 s, with 8
// goroutines in each worker, then heals them.
type slowMajority struct{ plainMasters }

func (slowMajority) inject(ctx context.Context, w *world) (chaosreport.Fault, error) {
	f := chaosreport.Fault{Start: time.Now(), Injected: true}
	for _, i := range []int{0, 1, 2} {
		w.Proxies[i].SetDelay(3 * w.cfg.NodeTimeout)
		f.Injected = f.Injected && chaosworld.Unresponsive(ctx, w.Proxies[i].Addr(), w.cfg.NodeTimeout)
	}
	time.Sleep(2 * time.Second)
	for _, i := range []int{0, 1, 2} {
		if err := w.Proxies[i].Heal(); err != nil {
			return f, err
		}
	}
	f.End = time.Now()
	return f, nil
}

// judgeOverload: service back within a second of the heal; the workers' goroutines bounded by
// what docs/design.md gives for a hung master (the pool's connections, one node timeout's calls
// and releases), here generously: 64 per goroutine taking locks plus the runtime's own.
func judgeOverload(cfg Config, runs []chaosreport.Run, r *Row, fail func(string, ...any)) {
	judgeRecovery(cfg, r, fail)
	if bound := 64*8 + 100; r.PeakGoroutines > bound {
		fail("a worker peaked at %d goroutines, bound %d", r.PeakGoroutines, bound)
	}
	if r.Unavailable == 0 {
		fail("no attempt found the quorum unavailable: the overload did not bite")
	}
}
