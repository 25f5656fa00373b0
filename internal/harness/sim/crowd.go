package sim

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"quorumlock.dev/redlock"
)

// Crowd schedules (issue 34): bursts of 20 to 100 callers on one resource,
// TryLock and waiting Lock, from clients with fairness and without, while
// latency spikes slow some clients' calls as on a starved machine. The
// invariants they add are in check.go (checkHandover, checkTryBursts) and
// in leftNothing (run.go); docs/simulation.md, "Crowds".

// burst is a crowd of callers on a resource of its own, all calling
// within a few ms of its start.
type burst struct {
	resource string
	at       time.Duration // from the schedule's start
	callers  []caller
}

// caller is one call of a burst.
type caller struct {
	client   int
	after    time.Duration // from the burst's start; distinct for every caller
	wait     bool          // Lock; otherwise TryLock
	deadline time.Duration // of the call's context; 0: none
	hold     time.Duration // how long a winner works before Unlock
}

// allTryLock reports whether every call of b is a TryLock: a TryLock burst,
// whose winners hold until every call of it has returned.
func (b burst) allTryLock() bool {
	return !slices.ContainsFunc(b.callers, func(c caller) bool { return c.wait })
}

func (b burst) String() string {
	if len(b.callers) == 0 {
		return fmt.Sprintf("burst at %v on %s: no callers", b.at, b.resource)
	}
	locks, hurried := 0, 0
	for _, c := range b.callers {
		if c.wait {
			locks++
		}
		if c.deadline > 0 && c.deadline < hurry {
			hurried++
		}
	}
	return fmt.Sprintf("burst at %v on %s: %d callers within %v, %d TryLock and %d Lock (%d in a hurry)",
		b.at, b.resource, len(b.callers), b.callers[len(b.callers)-1].after.Round(time.Microsecond),
		len(b.callers)-locks, locks, hurried)
}

// hurry bounds the deadline of a caller in a hurry: its context may end
// inside its round, and what the round set must still be released.
const hurry = 3 * time.Millisecond

// drawCrowd makes the crowd schedule of seed (see CrowdConfig): its TTL,
// fairness per client (every client fair in one schedule of four, none in
// one of four, drawn per client otherwise), the latency, cfg.Bursts
// bursts, up to two latency spikes and, in one schedule of four, a fault
// of one master.
func drawCrowd(seed uint64, cfg Config) Schedule {
	r := rand.New(rand.NewPCG(seed, 0xc40d))
	if cfg.TTL == 0 {
		cfg.TTL = ttls[r.IntN(len(ttls))]
	}
	s := Schedule{Seed: seed, Config: cfg, Fair: make([]bool, cfg.Clients)}
	mode := r.IntN(4)
	for i := range s.Fair {
		s.Fair[i] = mode == 0 || (mode > 1 && r.IntN(2) == 0)
	}
	s.Latency = []time.Duration{0, 100 * time.Microsecond, 500 * time.Microsecond, time.Millisecond}[r.IntN(4)]
	// The bursts start a TTL apart or so: one may still be draining when
	// the next begins, on its own resource.
	for b := range cfg.Bursts {
		u := burst{resource: fmt.Sprintf("crowd:%d", b), at: time.Duration(b)*cfg.TTL + time.Duration(r.Int64N(int64(cfg.TTL)))}
		n := 20 + r.IntN(81)
		// All TryLock, all Lock, or mixed, one in three each.
		kind := r.IntN(3)
		share := 1 + r.IntN(3) // a mixed burst's TryLocks, in quarters
		window := []time.Duration{100 * time.Microsecond, time.Millisecond, 5 * time.Millisecond}[r.IntN(3)]
		for range n {
			c := caller{client: r.IntN(cfg.Clients), after: time.Duration(r.Int64N(int64(window)))}
			c.wait = kind == 1 || (kind == 2 && r.IntN(4) >= share)
			if c.wait {
				// Long enough for many to win in turn, short enough that
				// some give up and leave their queue entries behind.
				c.deadline = cfg.TTL/2 + time.Duration(r.Int64N(int64(2*cfg.TTL)))
			}
			if kind != 0 && r.IntN(8) == 0 {
				c.deadline = time.Duration(1 + r.Int64N(int64(hurry)))
			}
			c.hold = time.Duration(r.Int64N(int64(10 * time.Millisecond)))
			u.callers = append(u.callers, c)
		}
		// Every caller at an instant of its own: two goroutines that call
		// at one instant run in the scheduler's order (see "Determinism").
		slices.SortStableFunc(u.callers, func(a, b caller) int { return cmp.Compare(a.after, b.after) })
		for i := 1; i < len(u.callers); i++ {
			u.callers[i].after = max(u.callers[i].after, u.callers[i-1].after+1)
		}
		s.Bursts = append(s.Bursts, u)
	}
	// The bursts' span: the spikes and the master's fault fall in it.
	span := time.Duration(cfg.Bursts+1) * cfg.TTL
	// Up to two latency spikes, one after the other: a client's calls to
	// every master (or every client's, one spike in three: one starved
	// host) take a few ms to a few node timeouts more, drawn per call.
	next := time.Duration(0)
	for range r.IntN(3) {
		f := fault{
			kind:   spike,
			at:     next + time.Duration(r.Int64N(int64(span))),
			lasts:  nodeTimeout + time.Duration(r.Int64N(int64(cfg.TTL/2-nodeTimeout))),
			client: r.IntN(cfg.Clients),
			delay:  time.Duration(1+r.IntN(20)) * time.Millisecond,
			vary:   nodeTimeout + time.Duration(r.Int64N(int64(2*nodeTimeout))),
		}
		if r.IntN(3) == 0 {
			f.client = allClients
		}
		s.Faults = append(s.Faults, f)
		next = f.at + f.lasts
	}
	// In one schedule of four, a master down or paused, or a client's
	// requests or replies to it lost, for up to half a TTL: the masters a
	// lost attempt's keys may stay on (invariant A skips them).
	if r.IntN(4) == 0 {
		s.Faults = append(s.Faults, fault{
			kind:   []kind{down, paused, lostAsk, lostReply}[r.IntN(4)],
			at:     time.Duration(r.Int64N(int64(span))),
			lasts:  time.Duration(1 + r.Int64N(int64(cfg.TTL/2))),
			client: r.IntN(cfg.Clients),
			master: r.IntN(cfg.Masters),
		})
	}
	return s
}

// crowds runs the schedule's bursts: a goroutine per caller, each calling
// at its instant; it returns when every caller is done.
func (r *run) crowds(clients []*redlock.Client) {
	var wg sync.WaitGroup
	for _, u := range r.s.Bursts {
		var tb *tryBurst
		if u.allTryLock() {
			tb = &tryBurst{left: len(u.callers), done: make(chan struct{}), errs: make(map[string]int)}
		}
		for k, c := range u.callers {
			wg.Go(func() {
				time.Sleep(time.Until(r.start.Add(u.at + c.after)))
				r.call(clients[c.client], u, k, c, tb)
			})
		}
	}
	wg.Wait()
}

// tryBurst is what a TryLock burst has come to so far. Its winners hold
// until every call of it has returned, so that a second winner cannot be
// one that came after the first had let go: exactly one is right.
type tryBurst struct {
	mu       sync.Mutex
	left     int            // calls still out
	won      int            // calls that returned a lock
	errs     map[string]int // the others, by kindOf their error
	from, to time.Time      // the first call, the last return
	done     chan struct{}  // closed when left is 0
}

// call is caller k of burst u, on client c: its TryLock or Lock, checked,
// and if it wins, its hold.
func (r *run) call(c *redlock.Client, u burst, k int, cl caller, tb *tryBurst) {
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	if cl.deadline > 0 {
		ctx, cancel = context.WithTimeout(ctx, cl.deadline)
	}
	defer cancel()
	ctx, att := withAttempt(ctx)
	began := time.Now()
	var l *redlock.Lock
	var err error
	op := "TryLock"
	if cl.wait {
		op = "Lock"
		l, err = c.Lock(ctx, u.resource, r.s.Config.TTL)
		r.waitedFor(cl.client, k, u.resource, began, err == nil)
	} else {
		l, err = c.TryLock(ctx, u.resource, r.s.Config.TTL)
		if took := time.Since(began); took > crowdTryLockBound {
			r.violation("c%d.%d: TryLock on %s took %v, beyond %v (one attempt's bound and a split vote's retries)",
				cl.client, k, u.resource, took, crowdTryLockBound)
		}
		if tb != nil {
			tb.returned(began, err)
		}
	}
	r.mu.Lock()
	r.res.Attempts++
	r.mu.Unlock()
	r.event("c%d.%d %s %s: %v", cl.client, k, op, u.resource, kindOf(err))
	if err != nil {
		r.leftNothing(cl.client, k, op+" lost", []string{u.resource}, began, r.lostBy(att))
		if tb != nil {
			r.tried(u, tb)
		}
		return
	}
	// A call that won may have lost attempts before (a Lock's, a split
	// TryLock's retried): nothing of theirs may stay either.
	h, keysSet := r.took(l, cl.client, k)
	r.leftNothing(cl.client, k, op+" won, its lost attempts", []string{u.resource}, began, r.lostBy(att))
	if tb != nil {
		r.tried(u, tb)
		<-tb.done
	}
	r.nap(cl.client, cl.hold)
	r.write(h, cl.client, k)
	h.end = time.Now()
	r.unlock(l, &h, cl.client, k, false, keysSet)
	r.mu.Lock()
	r.res.Holdings = append(r.res.Holdings, h)
	r.mu.Unlock()
}

// crowdTryLockBound is how long a TryLock of a crowd may take: the bound
// of one that made every round a split vote allows (1 + 5 retries,
// docs/design.md "Crowds"). A call that shares another's attempt (a
// flight) sends nothing itself and waits for that one's rounds.
var crowdTryLockBound = tryLockBound(1 + 5)

// returned counts a TryLock of the burst that began at began and returned
// err now.
func (tb *tryBurst) returned(began time.Time, err error) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if tb.from.IsZero() || began.Before(tb.from) {
		tb.from = began
	}
	tb.to = time.Now()
	if err == nil {
		tb.won++
	} else {
		tb.errs[kindOf(err)]++
	}
}

// tried ends one call of a TryLock burst: the last records the burst's
// outcome and lets its winners go on.
func (r *run) tried(u burst, tb *tryBurst) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if tb.left--; tb.left > 0 {
		return
	}
	var errs []string
	for _, e := range slices.Sorted(maps.Keys(tb.errs)) {
		errs = append(errs, fmt.Sprintf("%d %s", tb.errs[e], e))
	}
	r.mu.Lock()
	r.res.TryBursts = append(r.res.TryBursts, tryBurstResult{resource: u.resource, calls: len(u.callers),
		from: tb.from, to: tb.to, won: tb.won, errs: strings.Join(errs, ", ")})
	r.mu.Unlock()
	close(tb.done)
}

// tryBurstResult is what a TryLock burst ended with.
type tryBurstResult struct {
	resource string
	calls    int
	from, to time.Time // the first call, the last return
	won      int
	errs     string // the losers' errors, counted by kind
}
