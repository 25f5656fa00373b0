package chaos

import (
	"context"
	"syscall"
	"time"

	"quorumlock.dev/cmd/redlock-bench/internal/chaosreport"
	"quorumlock.dev/cmd/redlock-bench/internal/chaosworld"
	"quorumlock.dev/internal/harness/childproc"
)

// Process faults on the holder: paused past its TTL, or killed, inside its critical section.

var holderPause = &scenario{
	name: "holder-pause", about: "the holder is SIGSTOPped past its TTL mid-critical-section, then resumed",
	mustObserve: true, resources: 1, fault: func() injector { return pauseHolder{} },
}

var holderKill = &scenario{
	name: "holder-kill", about: "the holder is SIGKILLed mid-critical-section; the next worker gets the lock within TTL plus one attempt",
	resources: 1, fault: func() injector { return killHolder{} }, judge: judgeHolderKill,
}

// pauseHolder stops the worker that just claimed a row, for 1.5 TTLs, and resumes it: it
// wakes inside its critical section and writes, late.
type pauseHolder struct{ plainMasters }

func (pauseHolder) inject(ctx context.Context, w *world) (chaosreport.Fault, error) {
	op, err := w.Rec.Claimed(ctx, time.Now(), nil)
	if err != nil {
		return chaosreport.Fault{}, err
	}
	wp := w.Workers[op.Worker]
	f := chaosreport.Fault{Start: time.Now(), Resource: op.Resource}
	if err := syscall.Kill(wp.Pid(), syscall.SIGSTOP); err != nil {
		return f, err
	}
	f.Injected = chaosworld.WaitUntil(time.Second, func() bool { return childproc.Stopped(wp.Pid()) })
	time.Sleep(w.size.ttl * 3 / 2)
	f.Injected = f.Injected && childproc.Stopped(wp.Pid())
	if err := syscall.Kill(wp.Pid(), syscall.SIGCONT); err != nil {
		return f, err
	}
	f.End = time.Now()
	return f, nil
}

// killHolder kills the worker that just claimed a row.
type killHolder struct{ plainMasters }

func (killHolder) inject(ctx context.Context, w *world) (chaosreport.Fault, error) {
	op, err := w.Rec.Claimed(ctx, time.Now(), nil)
	if err != nil {
		return chaosreport.Fault{}, err
	}
	wp := w.Workers[op.Worker]
	f := chaosreport.Fault{Start: time.Now(), Resource: op.Resource}
	wp.Kill()
	f.End = f.Start
	f.Injected = wp.Exited()
	return f, nil
}

// judgeHolderKill: the testing matrix's bound, the TTL plus one attempt (the longest retry
// pause and a round of node timeouts), with room for the machine.
func judgeHolderKill(cfg Config, runs []chaosreport.Run, r *Row, fail func(string, ...any)) {
	bound := cfg.TTL + cfg.Retry + 2*cfg.NodeTimeout + slack(cfg)
	if r.RecoveryMs < 0 || r.RecoveryMs > chaosreport.Ms(bound) {
		fail("next holder after %.0f ms, bound %v", r.RecoveryMs, bound)
	}
}
