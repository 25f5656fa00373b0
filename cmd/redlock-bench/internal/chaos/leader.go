package chaos

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"syscall"
	"time"

	"quorumlock.dev/cmd/redlock-bench/internal/chaoscheck"
	"quorumlock.dev/cmd/redlock-bench/internal/chaosreport"
	"quorumlock.dev/cmd/redlock-bench/internal/chaosworker"
	"quorumlock.dev/cmd/redlock-bench/internal/chaosworld"
	"quorumlock.dev/internal/harness/childproc"
	"quorumlock.dev/redlock"
)

// Faults on an elected leader (package leadership). The workers are outbox relays: each
// campaigns for one role and, while it leads, delivers the role's messages one by one, each
// delivery a write that carries the term's fence (chaosworker's lead). A failover is timed from
// the loss of the leader (the pause, the kill, the cut, the call to Resign) to the next
// leader's Campaign returning in another process.

var leaderPause = &scenario{
	name: "leader-pause", about: "the leader is SIGSTOPped past its lease mid-delivery; a new leader is elected; the old one resumes and its delivery is refused",
	leader: true, mustObserve: true, resources: 1, fault: func() injector { return pauseLeader{} }, judge: judgeLeaderPause,
}

var leaderKill = &scenario{
	name: "leader-kill", about: "the leader is SIGKILLed mid-delivery; the next leader is elected within TTL plus one attempt",
	leader: true, resources: 1, fault: func() injector { return killLeader{} }, judge: judgeLeaderKill,
}

var leaderPartition = &scenario{
	name: "leader-partition", variant: "proxy", about: "the leader is cut off from 3 of 5 masters (its own fault proxies hang); its term ends, a new leader is elected",
	leader: true, workerProxies: true, resources: 1, fault: func() injector { return cutOffLeader{} }, judge: judgeLeaderPartition,
}

var leaderResign = &scenario{
	name: "leader-resign", about: "each leader resigns after 2 deliveries; the next is woken by the release's push, not the TTL",
	leader: true, resignEvery: 2, resources: 1, fault: func() injector { return resignLeader{} }, judge: judgeLeaderResign,
}

// The workers' role: the store's one row.
const role = "chaos:R0"

// otherThan accepts the holdings of workers other than w.
func otherThan(w int) func(chaoscheck.Holding) bool {
	return func(h chaoscheck.Holding) bool { return h.Worker != w }
}

// newLeader waits for a term of another worker than w won at or after since, at most d.
func newLeader(ctx context.Context, w *world, since time.Time, d time.Duration, worker int) (chaoscheck.Holding, bool) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	h, err := w.Rec.Won(ctx, since, otherThan(worker))
	return h, err == nil
}

// electionBound is how long a new leader may take after the old one's lease was last extended:
// the TTL, the longest retry pause and a round of node timeouts for the lock and one for the
// identity record, with room for the machine (judgeHolderKill's bound, for a campaign).
func electionBound(cfg Config) time.Duration {
	return cfg.TTL + cfg.Retry + 2*cfg.NodeTimeout + slack(cfg)
}

// pauseLeader stops the leader right after it claimed a message's row, before it delivers it,
// until a new leader has been elected and has claimed a row with its fence (at least 1.5 TTLs),
// then resumes it: it wakes inside its delivery and writes with its old fence. A pause that
// missed the window between claim and delivery (the write's call was already recorded) is
// undone at once and tried again on the next claim.
type pauseLeader struct{ plainMasters }

func (pauseLeader) inject(ctx context.Context, w *world) (chaosreport.Fault, error) {
	for try := 0; ; try++ {
		op, err := w.Rec.Claimed(ctx, time.Now(), nil)
		if err != nil {
			return chaosreport.Fault{}, err
		}
		wp := w.Workers[op.Worker]
		f := chaosreport.Fault{Start: time.Now(), Resource: role}
		if err := syscall.Kill(wp.Pid(), syscall.SIGSTOP); err != nil {
			return f, err
		}
		stopped := chaosworld.WaitUntil(time.Second, func() bool { return childproc.Stopped(wp.Pid()) })
		time.Sleep(100 * time.Millisecond) // what the worker wrote before it stopped is read
		late := len(w.Rec.Ops(func(o chaoscheck.Op) bool {
			return o.Worker == op.Worker && o.Kind == chaoscheck.Write && o.Fence == op.Fence && o.Call > op.Call
		})) > 0
		if late && try < 10 {
			if err := syscall.Kill(wp.Pid(), syscall.SIGCONT); err != nil {
				return f, err
			}
			continue
		}
		time.Sleep(w.size.ttl * 3 / 2)
		// The resumed write is stale once the new leader's claim with a larger fence returned.
		h, elected := newLeader(ctx, w, f.Start, 10*w.size.ttl, op.Worker)
		if elected {
			f.Failovers = []time.Duration{time.Unix(0, h.Acquired).Sub(f.Start)}
			_, err := w.Rec.Claimed(ctx, f.Start, func(o chaoscheck.Op) bool { return o.Fence > op.Fence })
			if err != nil {
				return f, err
			}
		}
		f.Injected = stopped && !late && elected && childproc.Stopped(wp.Pid())
		if err := syscall.Kill(wp.Pid(), syscall.SIGCONT); err != nil {
			return f, err
		}
		f.End = time.Now()
		return f, nil
	}
}

func judgeLeaderPause(cfg Config, runs []chaosreport.Run, r *Row, fail func(string, ...any)) {
	for i, run := range runs {
		if run.Counts.StaleWrites == 0 {
			fail("run %d: the resumed leader attempted no stale delivery", i+1)
		}
	}
	judgeFailovers(r, len(runs), electionBound(cfg), fail)
}

// killLeader kills the leader right after it claimed a message's row, and waits for the next
// leader; 1 time at the quick size, 3 at full size, each killed worker replaced by a new one.
type killLeader struct{ plainMasters }

func kills(cfg Config) int {
	if cfg.Quick {
		return 1
	}
	return 3
}

func (killLeader) inject(ctx context.Context, w *world) (chaosreport.Fault, error) {
	f := chaosreport.Fault{Start: time.Now(), Resource: role, Injected: true}
	for k := range kills(w.cfg) {
		op, err := w.Rec.Claimed(ctx, time.Now(), nil)
		if err != nil {
			return f, err
		}
		wp := w.Workers[op.Worker]
		at := time.Now()
		wp.Kill()
		w.Rec.Killed(op.Worker, at)
		f.End = at
		f.Injected = f.Injected && wp.Exited()
		if h, ok := newLeader(ctx, w, at, 10*w.size.ttl, op.Worker); ok {
			f.Failovers = append(f.Failovers, time.Unix(0, h.Acquired).Sub(at))
		}
		if k < kills(w.cfg)-1 {
			if err := w.AddWorker(); err != nil {
				return f, err
			}
		}
	}
	return f, nil
}

func judgeLeaderKill(cfg Config, runs []chaosreport.Run, r *Row, fail func(string, ...any)) {
	judgeFailovers(r, kills(cfg)*len(runs), electionBound(cfg), fail)
	noTwoLeaders(cfg, runs, fail)
}

// cutOffLeader hangs 3 of the 5 fault proxies of the worker that leads (the others reach every
// master), until another worker was elected and the cut-off one saw its term end, then heals.
type cutOffLeader struct{ plainMasters }

func (cutOffLeader) inject(ctx context.Context, w *world) (chaosreport.Fault, error) {
	op, err := w.Rec.Claimed(ctx, time.Now(), nil)
	if err != nil {
		return chaosreport.Fault{}, err
	}
	proxies := w.WorkerProxies[op.Worker]
	f := chaosreport.Fault{Start: time.Now(), Resource: role, Injected: true}
	for _, i := range []int{0, 1, 2} {
		proxies[i].Hang()
	}
	for _, i := range []int{0, 1, 2} {
		f.Injected = f.Injected && chaosworld.Unresponsive(ctx, proxies[i].Addr(), w.cfg.NodeTimeout)
	}
	h, elected := newLeader(ctx, w, f.Start, 10*w.size.ttl, op.Worker)
	if elected {
		f.Failovers = []time.Duration{time.Unix(0, h.Acquired).Sub(f.Start)}
	}
	// The cut-off worker's view of its term's end, which it reports over the store's side.
	chaosworld.WaitUntil(5*w.size.ttl, func() bool { return lostTerm(w.Rec.TermEnds(), op.Worker, f.Start) })
	for _, i := range []int{0, 1, 2} {
		if err := proxies[i].Heal(); err != nil {
			return f, err
		}
	}
	f.End = time.Now()
	return f, nil
}

// lostTerm reports a term of worker that ended after since by a loss of its lock (a failed
// renewal, or the lease running out), not by Resign.
func lostTerm(ends []chaosworker.TermEnd, worker int, since time.Time) bool {
	return slices.ContainsFunc(ends, func(e chaosworker.TermEnd) bool {
		return e.Worker == worker && e.At >= since.UnixNano() && strings.Contains(e.Cause, redlock.ErrLockLost.Error())
	})
}

func judgeLeaderPartition(cfg Config, runs []chaosreport.Run, r *Row, fail func(string, ...any)) {
	for i, run := range runs {
		ended := false
		for _, e := range run.TermEnds {
			ended = ended || (e.At >= run.Fault.Start.UnixNano() && e.At <= run.Fault.End.UnixNano() &&
				strings.Contains(e.Cause, redlock.ErrLockLost.Error()))
		}
		if !ended {
			fail("run %d: the cut-off leader's term did not end with its lock lost", i+1)
		}
	}
	judgeFailovers(r, len(runs), electionBound(cfg), fail)
	noTwoLeaders(cfg, runs, fail)
}

// resignLeader lets the leaders resign (each after 2 deliveries; a worker that resigned waits
// until another leads before it campaigns again) until 10 handovers at the quick size, 40 at
// full size, each timed from the call to Resign to the next term's Campaign returning.
type resignLeader struct{ plainMasters }

func handovers(cfg Config) int {
	if cfg.Quick {
		return 10
	}
	return 40
}

func (resignLeader) inject(ctx context.Context, w *world) (chaosreport.Fault, error) {
	f := chaosreport.Fault{Start: time.Now(), Resource: role}
	var took []time.Duration
	f.Injected = chaosworld.WaitUntil(30*time.Second+time.Duration(handovers(w.cfg))*w.size.ttl, func() bool {
		took = resignations(w.Rec.TermEnds(), w.Rec.Holdings(), f.Start)
		return len(took) >= handovers(w.cfg) || ctx.Err() != nil
	})
	f.Failovers, f.End = took, time.Now()
	return f, nil
}

// resignations times each resignation since start that a later term followed: from the call
// to Resign to the next term's Campaign returning.
func resignations(ends []chaosworker.TermEnd, terms []chaoscheck.Holding, start time.Time) []time.Duration {
	slices.SortFunc(terms, func(a, b chaoscheck.Holding) int { return cmp.Compare(a.Acquired, b.Acquired) })
	var took []time.Duration
	for _, e := range ends {
		if e.Cause != chaosworker.Resigned || e.At < start.UnixNano() {
			continue
		}
		if i := slices.IndexFunc(terms, func(h chaoscheck.Holding) bool { return h.Acquired >= e.At }); i >= 0 {
			took = append(took, time.Duration(terms[i].Acquired-e.At))
		}
	}
	return took
}

// resignTarget is the target for the handover after Resign, p99 on local servers. The
// row is judged on it plus slack(cfg), as every bound of the suite: room for a loaded machine,
// still far below the TTL that a handover without the release's push would take.
const resignTarget = 10 * time.Millisecond

func judgeLeaderResign(cfg Config, runs []chaosreport.Run, r *Row, fail func(string, ...any)) {
	judgeFailovers(r, handovers(cfg)*len(runs), resignTarget+slack(cfg), fail)
	noTwoLeaders(cfg, runs, fail)
}

// judgeFailovers wants at least want failovers timed, their p99 within bound.
func judgeFailovers(r *Row, want int, bound time.Duration, fail func(string, ...any)) {
	if r.Failovers < want {
		fail("%d of %d losses of the leader followed by a new leader", r.Failovers, want)
	}
	if r.FailoverP99Ms > chaosreport.Ms(bound) {
		fail("failover p99 %.2f ms, bound %v", r.FailoverP99Ms, bound)
	}
}

// noTwoLeaders: outside a pause (or a clock jump, which these scenarios do not make) no two
// terms are alive at once: a term's context ends, as its worker sees it, before the next
// leader's Campaign returns. lock_overlaps counts every pair that meets; the judge allows
// slack(cfg) between the two instants, since a worker that the machine does not run for a
// while is paused as far as its timers go (the term ends on the local clock, at most the drift
// allowance, 12 ms at TTL 1 s, before the keys expire on the masters).
func noTwoLeaders(cfg Config, runs []chaosreport.Run, fail func(string, ...any)) {
	n := 0
	for _, run := range runs {
		n += termsAliveAtOnce(run.Holdings, slack(cfg))
	}
	if n != 0 {
		fail("%d pairs of terms alive at once (by more than %v)", n, slack(cfg))
	}
}

// termsAliveAtOnce counts the pairs of terms of which the later was won more than room before
// the earlier one ended.
func termsAliveAtOnce(terms []chaoscheck.Holding, room time.Duration) int {
	n := 0
	for i, a := range terms {
		for _, b := range terms[i+1:] {
			first, second := a, b
			if b.Acquired < a.Acquired {
				first, second = b, a
			}
			if first.End()-second.Acquired > int64(room) {
				n++
			}
		}
	}
	return n
}
