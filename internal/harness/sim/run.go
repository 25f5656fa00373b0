package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/fence"
	"quorumlock.dev/internal/boottime"
	"quorumlock.dev/internal/harness/memredis"
	"quorumlock.dev/internal/seam"
	"quorumlock.dev/leadership"
	"quorumlock.dev/redlock"
)

// nodeTimeout is every client's: the default.
const nodeTimeout = 50 * time.Millisecond

// fairEntryTTL is the entry TTL of the clients WithFairness.
const fairEntryTTL = time.Second

// workersPerClient run each client's cycles: two goroutines of one process,
// so that in-process passes and handoffs happen too.
const workersPerClient = 2

// holding is one time a worker held a lock, as it saw it.
type holding struct {
	client, worker int
	resources      []string
	fences         []uint64
	fenced         bool
	got            time.Time // Lock (or TryLock, LockAll) returned it
	until          time.Time // its lease's end, moved by a successful Extend
	end            time.Time // the worker was done with it and called Unlock
	released       time.Time // Unlock returned (end, without an Unlock)
}

// waited is one Lock call on one resource, from its call to its return.
type waited struct {
	client, worker int
	resource       string
	began, ended   time.Time
	won            bool
}

// term is one leadership term of a client's candidate.
type term struct {
	client int
	fence  uint64
	start  time.Time // Campaign returned it
	end    time.Time // its Done closed
}

// Result is what one schedule did and what the checker found.
type Result struct {
	Schedule   Schedule
	Holdings   []holding
	Attempts   int // calls that asked for a lock
	Writes     []write
	Terms      []term   // leadership terms, as the candidates saw them
	Waits      []waited // Lock calls on one resource
	TryBursts  []tryBurstResult
	Violations []string
	Trace      []string
	Simulated  time.Duration // virtual time from start to end
	Calls      int64         // calls that reached the masters and the counter
	// TwinStale is how many writes the unfenced twin store accepted with a
	// fence below one it had applied before to the same key: the writes
	// the guard refused, shown to happen.
	TwinStale int
	// Paths counts the named rare paths the schedule reached (coverage).
	Paths map[string]int
}

// TraceHash is a hash of the trace (virtual times and outcomes; no token).
func (r Result) TraceHash() uint64 {
	h := fnv.New64a()
	for _, e := range r.Trace {
		io.WriteString(h, e)
		h.Write([]byte{'\n'})
	}
	return h.Sum64()
}

// run is one schedule's shared state.
type run struct {
	s       Schedule
	w       *World
	start   time.Time
	guard   fence.RedisGuard
	mu      sync.Mutex
	res     Result
	pauses  map[int][]fault // client pauses not yet taken, by client
	checkMu sync.Mutex
	later   sync.WaitGroup  // checks that wait for a lost attempt's undo
	won     map[string]bool // the tokens of the locks handed out: no lost attempt's
	held    map[string]int  // holdings of each token (a lock passed on in-process keeps its token)
	frozen  []span          // client pauses as they were taken (a worker takes one when it reaches it)
	trace   []event
	clocks  []*clientClock // by client
	wrongs  []wrongSpan    // the wrong-type faults that reached every master
	hangs   []fault        // the masters a probe-hang hung, as taken (see faults)
	paths   sync.Map       // path -> *atomic.Int64: the rare paths reached (hit)
}

// clientClock is a client's clocks: the bubble's, but for the suspends of
// its machine, which its monotonic clock (the one its leases and timers
// run on) misses and the clock that counts suspend does not.
type clientClock struct {
	mu      sync.Mutex
	step    time.Duration // of its wall clock, which only the fair queue's stamps read
	lag     time.Duration // the suspends that have ended
	since   time.Time     // when the suspend in progress began; zero: none
	resumed chan struct{} // closed when it ends
}

// awake returns once the client's machine is not suspended: the code of a
// worker runs only then (its timers do run meanwhile in a bubble, and see
// the client's clock stand still).
func (c *clientClock) awake() {
	c.mu.Lock()
	ch := c.resumed
	c.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

func (c *clientClock) Now() (time.Time, time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if !c.since.IsZero() {
		now = c.since // the monotonic clock stands still in a suspend
	}
	return now.Add(-c.lag), boottime.Now()
}

// Wall is the client's wall clock: the world's, stepped. A suspend does
// not hold it back (a machine's wall clock counts it).
func (c *clientClock) Wall() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.step)
}

// stepWall moves the client's wall clock by d.
func (c *clientClock) stepWall(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.step += d
}

// world converts t, read on the client's clock now, to the world's time.
func (c *clientClock) world(t time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.since.IsZero() {
		// In a suspend: the client's clock stands still at its start,
		// and the world's has moved on since (seed 9208740294967143661:
		// a lock taken in a suspend, its Until read there, taken for a
		// lease already over).
		return t.Add(c.lag + time.Since(c.since))
	}
	return t.Add(c.lag)
}

func (c *clientClock) suspend() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.since = time.Now()
	c.resumed = make(chan struct{})
}

func (c *clientClock) resume() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lag += time.Since(c.since)
	c.since = time.Time{}
	close(c.resumed)
	c.resumed = nil
}

// span is when a client's process was paused.
type span struct {
	client   int
	from, to time.Time
}

// Run plays schedule s and checks it. Call it inside a synctest bubble,
// with boottime.Virtual in effect.
func Run(s Schedule) Result {
	cfg := s.Config
	r := &run{s: s, w: NewWorld(cfg.Masters), start: time.Now(), pauses: make(map[int][]fault), won: make(map[string]bool), held: make(map[string]int)}
	r.w.Latency = s.Latency
	r.w.Seed = s.Seed
	r.w.Hit = r.hit
	r.w.Frozen = func(client int, from, to time.Time, what string) {
		r.event("c%d paused for %v: %s", client, to.Sub(from), what)
		r.mu.Lock()
		r.frozen = append(r.frozen, span{client: client, from: from, to: to})
		r.mu.Unlock()
	}
	r.w.Hung = func(master int, lasts time.Duration) {
		r.event("m%d hung for %v as a probe reached it", master, lasts)
		r.mu.Lock()
		r.hangs = append(r.hangs, fault{kind: probeHang, at: time.Since(r.start), lasts: lasts, master: master})
		r.mu.Unlock()
	}
	if s.Wire {
		r.w.Wire = r.event
	}
	r.res.Schedule = s
	if s.FarFences {
		r.w.Counter.StepClock(farFenceStep)
	}
	logger := slog.New(slog.DiscardHandler)
	clients := make([]*redlock.Client, cfg.Clients)
	links := make([][]driver.Conn, cfg.Clients)
	for i := range clients {
		// A counter per client, as each process has its own: what one
		// process minted does not guard another's.
		counter, err := fence.NewRedisCounter(r.w.CounterLink(i))
		if err != nil {
			r.violation("fence counter: %v", err)
			return r.res
		}
		// The client's tokens, ids and jitter come from the seed, as
		// everything else does, so that a seed replays its trace.
		src := &lockedRand{r: rand.New(rand.NewPCG(s.Seed, uint64(3000+i)))}
		if s.Wire {
			src.wire = func(v uint64) { r.event("c%d draws %016x", i, v) }
		}
		r.clocks = append(r.clocks, &clientClock{})
		seeded := seam.ClientOption(r.clocks[i], src).(redlock.Option)
		logger := logger
		if s.Wire {
			logger = slog.New(slog.NewTextHandler(traceWriter{r, i}, &slog.HandlerOptions{Level: slog.LevelDebug,
				ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
					if a.Key == slog.TimeKey {
						return slog.Attr{}
					}
					return a
				}}))
		}
		opts := []redlock.Option{redlock.WithFence(counter), redlock.WithLogger(logger),
			redlock.WithRetry(0, 20*time.Millisecond, 10*time.Millisecond), seeded,
			redlock.WithHooks(redlock.Hooks{Attempt: func(ctx context.Context, e redlock.Event) { r.attempted(ctx, i, e) }})}
		if s.Fair[i] {
			opts = append(opts, redlock.WithFairness(fairEntryTTL))
		}
		links[i] = r.w.Links(i)
		c, err := redlock.New(links[i], opts...)
		if err != nil {
			r.violation("client %d: %v", i, err)
			return r.res
		}
		clients[i] = c
	}
	for _, f := range s.Faults {
		if f.kind == clientPause || f.kind == clientSuspend {
			r.pauses[f.client] = append(r.pauses[f.client], f)
		}
	}

	faults := make(chan struct{})
	go func() {
		r.playFaults()
		close(faults)
	}()
	if len(s.Bursts) > 0 {
		r.crowds(clients)
	} else {
		r.cycles(clients, links)
	}
	<-faults
	r.later.Wait()
	for _, c := range clients {
		_ = c.Close()
	}
	r.res.Simulated = time.Since(r.start)
	// A client's calls in the background (the release of a lost attempt
	// on a master that did not answer in the round, tried again until the
	// master answers or the key's TTL has passed) end by then: let them,
	// here. Once the bubble's root returns its clock stops, and one still
	// waiting for its deadline then is a deadlock (seed
	// 2893520631271746896: a release whose reply was lost).
	time.Sleep(cfg.TTL + 2*nodeTimeout)
	r.w.Close()
	r.res.Calls = atomic.LoadInt64(&r.w.calls)
	r.w.mu.Lock()
	r.res.Writes = slices.Clone(r.w.writes)
	r.res.TwinStale = staleOnTwin(r.w.twin)
	r.w.mu.Unlock()
	if r.res.TwinStale > 0 {
		r.hit("stale write on the unfenced twin")
	}
	r.check()
	r.res.Paths = make(map[string]int)
	r.paths.Range(func(k, v any) bool {
		r.res.Paths[k.(string)] = int(v.(*atomic.Int64).Load())
		return true
	})
	r.res.Trace = r.traced()
	return r.res
}

// cycles runs the default schedule's clients: each client's candidate
// and its workers' lock cycles, until all are done.
func (r *run) cycles(clients []*redlock.Client, links [][]driver.Conn) {
	cfg := r.s.Config
	var wg sync.WaitGroup
	for c := range cfg.Clients {
		e, err := leadership.New(clients[c], "relay", leadership.WithTTL(cfg.TTL), leadership.WithIdentity(fmt.Sprintf("c%d", c)))
		if err != nil {
			r.violation("client %d: leadership: %v", c, err)
			continue
		}
		wg.Go(func() {
			r.stagger(1000 + c)
			r.candidate(e, c, termsPerCandidate)
		})
	}
	for c := range cfg.Clients {
		for k := range workersPerClient {
			cycles := cfg.Cycles / workersPerClient
			if k < cfg.Cycles%workersPerClient {
				cycles++
			}
			wg.Go(func() {
				r.stagger(c*workersPerClient + k)
				r.worker(clients[c], c, k, cycles)
			})
		}
	}
	wg.Wait()
}

func (r *run) violation(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res.Violations = append(r.res.Violations, fmt.Sprintf(format, args...))
}

// hit counts a named rare path the schedule reached, without a lock (see
// link: the calls of one instant must not contend).
func (r *run) hit(path string) {
	n, ok := r.paths.Load(path)
	if !ok {
		n, _ = r.paths.LoadOrStore(path, new(atomic.Int64))
	}
	n.(*atomic.Int64).Add(1)
}

func (r *run) event(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.trace = append(r.trace, event{at: time.Since(r.start), text: fmt.Sprintf(format, args...)})
}

// event is one line of the trace.
type event struct {
	at   time.Duration
	text string
}

// traced returns the trace in virtual time, the events of one instant in
// the order of their text: goroutines that run at one instant append in
// the scheduler's order, which a replay need not repeat.
func (r *run) traced() []string {
	slices.SortStableFunc(r.trace, func(a, b event) int {
		if a.at != b.at {
			return cmp.Compare(a.at, b.at)
		}
		return strings.Compare(a.text, b.text)
	})
	out := make([]string, len(r.trace))
	for i, e := range r.trace {
		out[i] = fmt.Sprintf("%12v %s", e.at, e.text)
	}
	return out
}

// traceWriter puts client's log lines into the trace (-sim.wire).
type traceWriter struct {
	r      *run
	client int
}

func (t traceWriter) Write(p []byte) (int, error) {
	t.r.event("c%d log %s", t.client, strings.TrimSpace(string(p)))
	return len(p), nil
}

// lockedRand is a client's seeded source, safe for its goroutines.
type lockedRand struct {
	mu   sync.Mutex
	r    *rand.Rand
	wire func(uint64) // -sim.wire: hears of every draw
}

func (l *lockedRand) Uint64() uint64 {
	l.mu.Lock()
	v := l.r.Uint64()
	l.mu.Unlock()
	if l.wire != nil {
		l.wire(v)
	}
	return v
}

// playFaults applies the schedule's faults at their times and heals each
// when it ends; it returns when every fault has ended.
func (r *run) playFaults() {
	fs := slices.Clone(r.s.Faults)
	sort.SliceStable(fs, func(i, j int) bool { return fs[i].at < fs[j].at })
	var ends sync.WaitGroup
	for _, f := range fs {
		if d := f.at - time.Since(r.start); d > 0 {
			time.Sleep(d)
		}
		r.event("fault %v", f)
		heal := r.apply(f)
		if heal != nil {
			ends.Go(func() {
				time.Sleep(f.lasts)
				r.event("healed %v", f)
				heal()
			})
		}
	}
	ends.Wait()
}

// apply starts fault f and returns what ends it, or nil.
func (r *run) apply(f fault) (heal func()) {
	w := r.w
	switch f.kind {
	case delayed:
		if f.master == allMasters {
			for i := range w.Masters {
				w.Cut(f.client, i, cut{delay: f.delay})
			}
			return func() {
				for i := range w.Masters {
					w.Cut(f.client, i, cut{})
				}
			}
		}
		w.Cut(f.client, f.master, cut{delay: f.delay})
		return func() { w.Cut(f.client, f.master, cut{}) }
	case lostAsk:
		w.Cut(f.client, f.master, cut{dropAsk: true})
		return func() { w.Cut(f.client, f.master, cut{}) }
	case lostReply:
		w.Cut(f.client, f.master, cut{dropReply: true})
		return func() { w.Cut(f.client, f.master, cut{}) }
	case paused:
		w.Pause(f.master)
		return func() { w.Resume(f.master) }
	case down:
		w.Masters[f.master].Fail(memredis.ErrDown)
		return func() { w.Masters[f.master].Fail(nil) }
	case restarted:
		w.Masters[f.master].Restart()
	case clockStep:
		w.Masters[f.master].StepClock(f.delay)
	case aofLag:
		m := w.Masters[f.master]
		snap := m.Snapshot()
		return func() { m.RestartFrom(snap) }
	case failover:
		m := w.Masters[f.master]
		snap := m.Snapshot()
		gone := time.AfterFunc(f.delay, func() { m.Fail(memredis.ErrDown) })
		return func() {
			gone.Stop()
			m.RestartFrom(snap)
			m.Fail(nil)
		}
	case clockFast:
		m := w.Masters[f.master]
		m.SetClockRate(f.rate)
		return func() { m.SetClockRate(1) }
	case clientWallStep:
		r.clocks[f.client].stepWall(f.delay)
	case spike:
		var hit []int
		for c := range r.s.Config.Clients {
			if f.client == allClients || f.client == c {
				hit = append(hit, c)
			}
		}
		for _, c := range hit {
			for i := range w.Masters {
				w.Cut(c, i, cut{delay: f.delay, vary: f.vary})
			}
		}
		return func() {
			for _, c := range hit {
				for i := range w.Masters {
					w.Cut(c, i, cut{})
				}
			}
		}
	case counterLost:
		w.Counter.Restart()
	case counterDown:
		w.Counter.Fail(memredis.ErrDown)
		return func() { w.Counter.Fail(nil) }
	case storeDelayed, storeLostAsk, storeLostReply:
		w.Cut(f.client, storeNode, cut{delay: f.delay, dropAsk: f.kind == storeLostAsk, dropReply: f.kind == storeLostReply})
		return func() { w.Cut(f.client, storeNode, cut{}) }
	case storePaused:
		w.PauseStore()
		return func() { w.ResumeStore() }
	case mintLostReply:
		w.Cut(f.client, counterNode, cut{dropReply: true})
		return func() { w.Cut(f.client, counterNode, cut{}) }
	case roundPause, handoffPause:
		w.Arm(f.client, f.kind, f.lasts)
	case wrongType:
		return r.wrongKeys(fmt.Sprintf("lock:job:%d", f.master))
	case probeHang:
		w.hangProbes.Store(true)
		return func() { w.hangProbes.Store(false) }
	}
	return nil
}

// Scripts of the wrong-type fault: a hash written where the lock key is
// (when no lock holds it), and taken away again.
var (
	setWrongType   = driver.NewScript("if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('HSET', KEYS[1], 'wrong', 'type') return 1 end return 0")
	unsetWrongType = driver.NewScript("local ok, v = pcall(redis.call, 'HGET', KEYS[1], 'wrong') if ok and v == 'type' then redis.call('DEL', KEYS[1]) return 1 end return 0")
)

// wrongKeys writes a hash at key on every master, each once no lock holds
// it there (tried every 5 ms), and returns what takes them away. Once every
// master has one, the stretch until the heal is recorded, if every master
// still has its hash at the heal: a Lock waiting for the resource then
// must stop with ErrWrongType (checkWrongType). A master that restarted or
// failed over meanwhile may have lost its hash, and a lock key of a string
// taken its place (seed 1520286547789764567: master 4 lost it in a
// restart before the last master got one).
func (r *run) wrongKeys(key string) (heal func()) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var last time.Time
	set := 0
	for _, m := range r.w.Masters {
		wg.Go(func() {
			for {
				if v, err := m.Conn().Eval(context.Background(), setWrongType, []string{key}); err == nil && v == int64(1) {
					mu.Lock()
					set++
					last = time.Now()
					mu.Unlock()
					return
				}
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
			}
		})
	}
	return func() {
		close(stop)
		wg.Wait()
		kept := 0
		for _, m := range r.w.Masters {
			if v, err := m.Conn().Eval(context.Background(), unsetWrongType, []string{key}); err == nil && v == int64(1) {
				kept++
			}
		}
		if set == len(r.w.Masters) && kept == set && last.Before(time.Now()) {
			r.mu.Lock()
			r.wrongs = append(r.wrongs, wrongSpan{resource: strings.TrimPrefix(key, "lock:"), from: last, to: time.Now()})
			r.mu.Unlock()
			r.hit("wrong-type: a lock key of another type on every master")
		}
	}
}

// wrongSpan is when every master held a key of another type for resource.
type wrongSpan struct {
	resource string
	from, to time.Time
}

// takePause returns a pause or suspend of client's that has begun, if any.
func (r *run) takePause(client int) (fault, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ps := r.pauses[client]
	if len(ps) == 0 || ps[0].at > time.Since(r.start) {
		return fault{}, false
	}
	r.pauses[client] = ps[1:]
	return ps[0], true
}

// worker runs cycles lock cycles of client c: lock one of the resources
// (TryLock, Lock, LockAll, or Do), hold it (maybe extending it, or renewing
// it through work longer than its TTL), write under its fences through the
// guard, unlock.
func (r *run) worker(c *redlock.Client, client, k, cycles int) {
	cfg := r.s.Config
	rng := rand.New(rand.NewPCG(r.s.Seed, uint64(client*workersPerClient+k+1)))
	// A stream of its own for the choices added later (Do, Renew), so that
	// the first stream's draws stay as they were.
	rng2 := rand.New(rand.NewPCG(r.s.Seed, uint64(2000+client*workersPerClient+k)))
	resources := make([]string, cfg.Resources)
	for i := range resources {
		resources[i] = fmt.Sprintf("job:%d", i)
	}
	// A third for the harness's own timing.
	rng3 := rand.New(rand.NewPCG(r.s.Seed, uint64(5000+client*workersPerClient+k)))
	// A fourth for an Extend in flight when Unlock runs, so that the
	// draws of the others stay as they were.
	rng4 := rand.New(rand.NewPCG(r.s.Seed, uint64(7000+client*workersPerClient+k)))
	for range cycles {
		// A few hundred ns before each call, drawn from the seed: the
		// call a worker makes right after its last one returned would
		// otherwise start at the instant the client's background work
		// woken by that return runs (a waiter nudged by an Unlock), in
		// an order the scheduler picks.
		r.nap(client, time.Duration(1+rng3.IntN(1000)))
		res := resources[rng.IntN(len(resources))]
		mode := rng.IntN(10)
		renewed := rng2.IntN(4) == 0
		wait := 4 * cfg.TTL
		if mode == 2 {
			// LockAll polls at the retry delay (no push wake-up for several
			// resources): a TTL of it is enough to meet the others' holds.
			wait = cfg.TTL
		}
		if mode < 2 && rng2.IntN(3) == 0 {
			// A caller in a hurry: its context may end mid-round, and the
			// lost attempt must still be cleaned up.
			wait = time.Duration(rng2.Int64N(int64(3 * time.Millisecond)))
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		ctx, att := withAttempt(ctx)
		att.each, att.worker = mode >= 2, k // a TryLock (mode < 2) is checked when it returns
		began := time.Now()
		var l *redlock.Lock
		var err error
		op := "Lock"
		switch {
		case mode < 2:
			op = "TryLock"
			l, err = c.TryLock(ctx, res, cfg.TTL)
			took, rounds := time.Since(began), att.rounds()
			if took > tryLockBound(rounds) && !r.pausedIn(client, began, time.Now()) {
				r.violation("client %d: TryLock took %v in %d rounds, beyond the bound %v (node timeout %v, fence timeout %v)", client, took, rounds, tryLockBound(rounds), nodeTimeout, fence.DefaultTimeout)
			}
			if rounds > 1 {
				r.hit("split vote: a TryLock retried its round")
			}
		case mode < 3 && len(resources) > 1:
			op = "LockAll"
			l, err = c.LockAll(ctx, resources, cfg.TTL)
		case renewed && rng2.IntN(2) == 0:
			op = "Do"
			won := false
			err = c.Do(ctx, res, cfg.TTL, func(ctx context.Context, l *redlock.Lock) error {
				won = true
				r.waitedFor(client, k, res, began, true)
				r.hold(ctx, l, client, k, rng, rng2, nil, true, false)
				return nil
			})
			r.mu.Lock()
			r.res.Attempts++
			r.mu.Unlock()
			if !won {
				r.waitedFor(client, k, res, began, false)
				r.leftNothing(client, k, op+" lost", []string{res}, began, r.lostBy(att))
			}
			r.event("c%d.%d Do %s: %v", client, k, res, kindOf(err))
			cancel()
			if !won {
				r.nap(client, time.Duration(rng.IntN(50))*time.Millisecond)
			}
			continue
		default:
			l, err = c.Lock(ctx, res, cfg.TTL)
			r.waitedFor(client, k, res, began, err == nil)
		}
		r.mu.Lock()
		r.res.Attempts++
		r.mu.Unlock()
		if ctx.Err() == nil {
			// A caller whose deadline ended the round has no quorum's
			// answer to expect.
			r.noFalseOutage(client, k, op, began, err, false)
		}
		if err != nil {
			cancel()
			r.event("c%d.%d %s %s: %v", client, k, op, res, kindOf(err))
			if op == "LockAll" {
				r.leftNothing(client, k, op+" lost", resources, began, r.lostBy(att))
			} else {
				r.leftNothing(client, k, op+" lost", []string{res}, began, r.lostBy(att))
			}
			r.nap(client, time.Duration(rng.IntN(50))*time.Millisecond)
			continue
		}
		r.hold(ctx, l, client, k, rng, rng2, rng4, renewed, true)
		cancel()
	}
}

// tryLockBound is how long a TryLock that made rounds rounds (its split
// retries, docs/design.md "Crowds") may take: each round, bounded by the
// node timeout and the diagnosis's quarter of one; when lost, the
// releases of the masters that answered, each bounded by the node
// timeout, and the read of the holders on the masters that refused, one
// node timeout ("Cleaning up after a lost attempt"); a random delay of at
// most a node timeout before each retry; and the fence's mint, bounded by
// the counter's own timeout (a counter that does not answer, as in a
// suspend of the client's machine, seed 614920859905071824).
func tryLockBound(rounds int) time.Duration {
	rounds = max(rounds, 1)
	return time.Duration(rounds)*(3*nodeTimeout+nodeTimeout/4) + time.Duration(rounds-1)*nodeTimeout + fence.DefaultTimeout + time.Millisecond
}

// outMemory is how far back a master's silence may keep the client's
// breaker out: the probe that closes it goes out at most a node timeout
// after the last, and takes up to one; with room.
const outMemory = 6 * nodeTimeout

// noFalseOutage checks that op of client's worker k, begun at began, did
// not end in ErrQuorumUnavailable while a majority of the masters answered
// the client throughout (and, if promptly, with no delay of the schedule's
// on the way): a quorum was there to vote (a hung probe master must not
// fail the round: its wait is a quarter of the node timeout).
func (r *run) noFalseOutage(client, k int, op string, began time.Time, err error, promptly bool) {
	if !errors.Is(err, redlock.ErrQuorumUnavailable) || strings.Contains(err.Error(), "WRONGTYPE") {
		// A master whose key has another type cannot vote, and counts as
		// failed: fewer of them than a majority beside masters down is an
		// outage by design (seed 5988897912436338871); the wrong-type
		// invariant judges those calls.
		return
	}
	// A master that did not answer shortly before may still be out for
	// the client's breaker (redlock/internal/node: out until a probe,
	// at most one per node timeout, gets a reply): counted as down.
	var up []int
	for i := range r.w.Masters {
		if r.answers(client, i, began.Add(-outMemory), time.Now()) && (!promptly || r.undelayed(client, i, began.Add(-outMemory), time.Now())) {
			up = append(up, i)
		}
	}
	if len(up) > len(r.w.Masters)/2 {
		how := "answered"
		if promptly {
			how = "answered promptly"
		}
		r.violation("c%d.%d: %s from %v to %v failed with a false outage (%v) while masters %v %s throughout",
			client, k, op, r.at(began), r.at(time.Now()), err, up, how)
	}
}

// attempted is the Attempt hook of client's: one attempt of a worker's
// Lock, LockAll or Do (a TryLock is checked when it returns) whose
// context had not ended must not fail with a false outage either. A
// probed attempt (a plain waiter woken by a release) may ask the others
// a quarter of the node timeout late: only masters that answered without
// delay count for it (noFalseOutage's promptly). An attempt that met a
// key of another type is left to the wrong-type invariant: a master whose
// key has another type cannot vote and counts as failed, so a few of them
// beside masters down make an outage by design (docs/simulation.md,
// "What it found").
func (r *run) attempted(ctx context.Context, client int, e redlock.Event) {
	if !errors.Is(e.Err, redlock.ErrQuorumUnavailable) || ctx.Err() != nil {
		return
	}
	if a, ok := ctx.Value(attemptKey{}).(*attempt); ok && a.each {
		r.noFalseOutage(client, a.worker, "an attempt", time.Now().Add(-e.Took), e.Err, true)
	}
}

// undelayed reports whether no delay of the schedule slowed client's
// calls to master i from a to b.
func (r *run) undelayed(client, i int, a, b time.Time) bool {
	return r.undisturbed(a, b, func(int) bool { return false }, func(f fault) bool {
		return f.kind == delayed && f.client == client && (f.master == i || f.master == allMasters)
	})
}

// storeCut reports whether err is the timeout of client's write sent at
// since on a store link the schedule cuts (store-delayed, -lost-ask,
// -lost-reply, -paused), or in a pause of client's process since: the
// writer gave up on it, and it may land later or never.
func (r *run) storeCut(err error, client int, since time.Time) bool {
	if !errors.Is(err, errTimeout) {
		return false
	}
	return r.pausedIn(client, since, time.Now()) || slices.ContainsFunc(r.s.Faults, func(f fault) bool {
		return f.kind >= storeDelayed && f.kind <= storePaused
	})
}

// pausedIn reports whether client's process was stopped by a pause the
// world took (round-pause, handoff-pause) between a and b.
func (r *run) pausedIn(client int, a, b time.Time) bool {
	return !r.undisturbed(a, b, func(c int) bool { return c == client }, func(fault) bool { return false })
}

// nap sleeps d in client's code: in a suspend of its machine, until it
// ends.
func (r *run) nap(client int, d time.Duration) {
	time.Sleep(d)
	r.clocks[client].awake()
}

// stagger waits a few µs drawn from the seed and i before a goroutine of
// the schedule starts, so that no two start at one virtual instant and
// race for the shared state of a client (its seeded random source among
// it) in an order the scheduler picks.
func (r *run) stagger(i int) {
	time.Sleep(time.Duration(1+i)*time.Microsecond + time.Duration(rand.New(rand.NewPCG(r.s.Seed, uint64(4000+i))).IntN(1000)))
}

// waitedFor records a Lock call on res that returned now.
func (r *run) waitedFor(client, k int, res string, began time.Time, won bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res.Waits = append(r.res.Waits, waited{client: client, worker: k, resource: res, began: began, ended: time.Now(), won: won})
}

// undoBound is how long after a lost call its undo may still be on its way
// to a master that answers: the releases that were sent in the background
// when their master's call returned, each bounded by the node timeout.
const undoBound = 2*nodeTimeout + time.Millisecond

// releaseRetryBound is invariant A's (issue 34): how long after a latency
// spike of its client has ended a key of a lost or abandoned attempt may
// stay on a master that stayed reachable. A release that got no reply is
// tried again in the background until the master answers or the key's TTL
// has passed; the spike may have cost it every try. Three node timeouts:
// a try still out when the spike ended (one), the wait before the next
// (at most one: a master that answers again is to be tried again soon,
// whatever the spike cost; 0e8d825's wait doubles up to a second, and
// misses the bound after long spikes, docs/simulation.md "Crowds"), and
// that try's call (within one).
const releaseRetryBound = 3*nodeTimeout + time.Millisecond

// leftNothing checks, once the undo of a call that lost (or of a lock whose
// Extend failed) had time to land, that no master that stayed reachable
// for the client from since on keeps a lock key of resources with a token
// that ours says was the call's, then or later: a queued waiter's entry
// left behind would be handed the key by a later release. what names the
// call and its outcome, for the violation. The undo has undoBound after
// the call returned, and releaseRetryBound after the end of a latency
// spike of the client's in that span (invariant A). The key of an entry
// left behind can come until the entry has expired, and then lives a TTL:
// the check looks every node timeout until then.
func (r *run) leftNothing(client, k int, what string, resources []string, since time.Time, ours func(token string) bool) {
	returned := time.Now()
	by, spiked := r.cleanBy(client, since, returned)
	last := by.Add(fairEntryTTL + r.s.Config.TTL)
	how := "answered throughout"
	if !spiked.IsZero() {
		how = fmt.Sprintf("answered throughout (late in a latency spike until %v)", r.at(spiked))
	}
	r.later.Go(func() {
		time.Sleep(by.Sub(returned))
		for {
			for i, m := range r.w.Masters {
				if !r.reachable(client, i, since, time.Now()) {
					continue
				}
				for _, res := range resources {
					if v, ok := m.Get("lock:" + res); !ok || !ours(v) {
						continue
					}
					if !time.Now().After(by) {
						r.violation("c%d.%d's %s on %s at %v, and master %d, which %s, still kept its key %v later",
							client, k, what, res, r.at(returned), i, how, by.Sub(returned))
					} else {
						r.violation("c%d.%d's %s on %s at %v, and master %d, which %s, had its key again %v later (gone %v later: an entry left behind was handed the key?)",
							client, k, what, res, r.at(returned), i, how, time.Since(returned), by.Sub(returned))
					}
					return
				}
			}
			if !time.Now().Before(last) {
				return
			}
			time.Sleep(nodeTimeout)
		}
	})
}

// lostBy is leftNothing's ours for the lost attempts of a call: the tokens
// it sent, but those of locks handed out (an attempt may be shared by the
// calls of one client, TryLock's in a crowd, and another caller may hold
// what it won).
func (r *run) lostBy(a *attempt) func(token string) bool {
	return func(token string) bool {
		r.mu.Lock()
		won := r.won[token]
		r.mu.Unlock()
		return !won && a.has(token)
	}
}

// cleanBy is when the undo of client's call, made from since to returned,
// has landed on every master that stayed reachable: undoBound after it
// returned, or releaseRetryBound after the end of the last latency spike
// of the client's in effect in that span, if later. spiked is that end
// (zero: no spike).
func (r *run) cleanBy(client int, since, returned time.Time) (by, spiked time.Time) {
	by = returned.Add(undoBound)
	for moved := true; moved; {
		moved = false
		for _, f := range r.s.Faults {
			from, to := r.start.Add(f.at), r.start.Add(f.at+f.lasts)
			if f.kind != spike || (f.client != allClients && f.client != client) || to.Before(since) || from.After(by) {
				continue
			}
			if to.After(spiked) {
				spiked = to
			}
			if end := to.Add(releaseRetryBound); end.After(by) {
				by, moved = end, true
			}
		}
	}
	return by, spiked
}

// answers reports whether master i answered client's calls from a to b: no
// fault of the schedule touched the two in that span (a delay shorter than
// the node timeout is an answer, late).
func (r *run) answers(client, i int, a, b time.Time) bool {
	return r.undisturbed(a, b, func(c int) bool { return c == client }, func(f fault) bool {
		return cutsOff(f, client, i, true)
	})
}

// reachable is answers, but for latency spikes: a call in one may time out,
// one sent again after it gets through.
func (r *run) reachable(client, i int, a, b time.Time) bool {
	return r.undisturbed(a, b, func(c int) bool { return c == client }, func(f fault) bool {
		return cutsOff(f, client, i, false)
	})
}

// cutsOff reports whether f keeps master i from answering client's calls
// in time. A latency spike counts only when slow does (for answers), and
// then when its calls can take the node timeout: a call sent again after
// it gets through (reachable).
func cutsOff(f fault, client, i int, slow bool) bool {
	switch f.kind {
	case delayed:
		return f.client == client && (f.master == i || f.master == allMasters) && f.delay >= nodeTimeout
	case spike:
		return slow && (f.client == client || f.client == allClients) && f.delay+f.vary >= nodeTimeout
	case lostAsk, lostReply:
		return f.client == client && f.master == i
	case paused, down, restarted, clockStep, aofLag, failover, probeHang:
		return f.master == i
	case clientPause, clientSuspend:
		return f.client == client
	}
	return false
}

// keptBy reports whether every master answered client from a to b and
// kept its keys for as long as they were set for: no fault touched the
// two, and no master's clock ran fast.
func (r *run) keptBy(client int, a, b time.Time) bool {
	for i := range r.w.Masters {
		if !r.answers(client, i, a, b) {
			return false
		}
	}
	return r.undisturbed(a, b, func(int) bool { return false }, func(f fault) bool { return f.kind == clockFast })
}

// undisturbed reports whether, between a and b, no client pause as taken
// (of a client that counts) and no fault of the schedule (that counts) was
// in effect.
func (r *run) undisturbed(a, b time.Time, pauseCounts func(client int) bool, faultCounts func(fault) bool) bool {
	overlaps := func(from, to time.Time) bool { return !to.Before(a) && !from.After(b) }
	r.mu.Lock()
	frozen := slices.Clone(r.frozen)
	r.mu.Unlock()
	for _, p := range frozen {
		if pauseCounts(p.client) && overlaps(p.from, p.to) {
			return false
		}
	}
	for _, f := range r.faults() {
		if overlaps(r.start.Add(f.at), r.start.Add(f.at+f.lasts)) && faultCounts(f) {
			return false
		}
	}
	return true
}

// faults is the schedule's faults as they took effect: a probe-hang's
// window does nothing by itself, the hangs it caused stand in its place
// (each a master stopped for its span, as a paused one is).
func (r *run) faults() []fault {
	if !slices.ContainsFunc(r.s.Faults, func(f fault) bool { return f.kind == probeHang }) {
		return r.s.Faults
	}
	r.mu.Lock()
	hangs := r.hangs
	r.mu.Unlock()
	out := make([]fault, 0, len(r.s.Faults)+len(hangs))
	for _, f := range r.s.Faults {
		if f.kind != probeHang {
			out = append(out, f)
		}
	}
	return append(out, hangs...)
}

// termsPerCandidate is how many terms each client's candidate serves.
const termsPerCandidate = 2

// candidate campaigns for the role "relay" until it has served terms
// terms (or its campaigns keep failing): a leader relays (fenced writes to
// data:relay, each followed by Progress) for a while, then resigns, or
// stops showing progress and loses the term when its renewal finds none.
func (r *run) candidate(e *leadership.Election, client, terms int) {
	cfg := r.s.Config
	rng := rand.New(rand.NewPCG(r.s.Seed, uint64(1000+client)))
	for tries := 0; terms > 0 && tries < 4*termsPerCandidate; tries++ {
		ctx, cancel := context.WithTimeout(context.Background(), 4*cfg.TTL)
		t, err := e.Campaign(ctx)
		cancel()
		if err != nil {
			r.event("c%d campaign: %v", client, kindOf(err))
			r.nap(client, time.Duration(rng.IntN(100))*time.Millisecond)
			continue
		}
		terms--
		tm := term{client: client, fence: t.Fence(), start: time.Now()}
		r.event("c%d leads with fence %d", client, tm.fence)
		ended := make(chan time.Time, 1)
		go func() {
			<-t.Done()
			ended <- time.Now()
		}()
		stuck := rng.IntN(3) == 0 // stops showing progress: the term must end by itself
		for range 1 + rng.IntN(5) {
			r.nap(client, time.Duration(rng.IntN(int(cfg.TTL/time.Millisecond)/3+1))*time.Millisecond)
			sent := time.Now()
			wctx, wcancel := context.WithTimeout(context.Background(), time.Second)
			err := r.w.guarded(wctx, client, "data:relay", tm.fence, func(ctx context.Context, store driver.Conn) error {
				return r.guard.Set(ctx, store, "data:relay", fmt.Sprintf("c%d", client), tm.fence, 0)
			})
			wcancel()
			if err != nil && !errors.Is(err, fence.ErrFenceRejected) && !r.storeCut(err, client, sent) {
				r.violation("c%d: the store failed a leader's write: %v", client, err)
			}
			if !stuck {
				t.Progress()
			}
		}
		if stuck {
			tm.end = <-ended
		} else {
			_ = t.Resign(context.Background())
			tm.end = <-ended
		}
		r.event("c%d term of fence %d ended: %v", client, tm.fence, kindOf(context.Cause(t.Context())))
		r.mu.Lock()
		r.res.Terms = append(r.res.Terms, tm)
		r.mu.Unlock()
	}
}

// hold is one critical section of l. A renewed one runs Renew and works for
// up to one and a half TTLs, showing progress; an unlocked one ends with
// Unlock (in Do, Do unlocks).
func (r *run) hold(ctx context.Context, l *redlock.Lock, client, k int, rng, rng2, rng4 *rand.Rand, renewed, unlock bool) {
	cfg := r.s.Config
	clk := r.clocks[client] // Until is read on it: the world's time is later by its suspends
	h, keysSet := r.took(l, client, k)
	r.nap(client, time.Duration(rng.IntN(100))*time.Millisecond)
	if renewed {
		if err := l.Renew(cfg.TTL, 3*cfg.TTL); err != nil {
			select {
			case <-l.Done():
				// The lock had ended (its holder's machine suspended past
				// the lease, say): Renew says so.
			default:
				r.violation("c%d.%d: Renew of a lock that has not ended: %v", client, k, err)
			}
		}
		for range 1 + rng2.IntN(6) {
			r.nap(client, cfg.TTL/4)
			l.Progress()
		}
		h.until = clk.world(l.Until())
		r.event("c%d.%d renewed until %v: %v", client, k, h.until.Sub(r.start), kindOf(context.Cause(l.Context())))
	} else if rng.IntN(4) == 0 {
		if rng2.IntN(3) == 0 {
			// An Extend at the last moment (its doc asks for a node timeout
			// before Until): its round may end after the lease it extends,
			// and must then fail and free every master, whether or not
			// Done was asked for.
			eps := time.Duration(1+rng2.IntN(60)) * time.Microsecond
			if d := time.Until(clk.world(l.Until())) - eps; d > 0 {
				r.nap(client, d)
			}
		}
		before := clk.world(l.Until())
		err := l.Extend(ctx, cfg.TTL)
		if err != nil && time.Now().After(before) {
			r.hit("late Extend: its round ended after the lease")
		}
		if err == nil {
			if time.Now().After(before) {
				r.violation("c%d.%d: Extend succeeded at %v, after the lease it extended had run out at %v",
					client, k, r.at(time.Now()), r.at(before))
			}
			h.until = clk.world(l.Until())
			r.event("c%d.%d extended until %v", client, k, h.until.Sub(r.start))
		} else {
			r.event("c%d.%d extend: %v", client, k, kindOf(err))
			// A failed Extend ends the lock and frees every master, for a
			// holder that calls Unlock then and for one that gives up on
			// the lock it lost without it (one in two): every master that
			// answered since the lock's keys were set. One that did not
			// may keep what the client could not clean up there (a queue
			// entry whose removal failed, to which a later release of
			// another client hands the key: docs/design.md, "What a dead
			// waiter costs"; seed 2671326905192134366).
			token := l.Token()
			r.leftNothing(client, k, "Extend failed", h.resources, keysSet, func(v string) bool { return v == token })
			if rng2.IntN(2) == 0 {
				unlock = false
				r.event("c%d.%d gives up the lost lock without Unlock", client, k)
			}
		}
	}
	lease := h.until // in the world's time, before a pause
	f, paused := r.takePause(client)
	if paused {
		d := f.lasts
		suspend := f.kind == clientSuspend
		r.event("c%d.%d %v for %v", client, k, map[bool]string{false: "paused", true: "suspended"}[suspend], d)
		r.mu.Lock()
		r.frozen = append(r.frozen, span{client: client, from: time.Now(), to: time.Now().Add(d)})
		r.mu.Unlock()
		r.w.Freeze(client)
		if suspend {
			clk.suspend()
		}
		time.Sleep(d)
		if suspend {
			clk.resume()
		}
		r.w.Thaw(client)
	}
	// A lock that ended early (a failed Extend or renewal) says so in Until.
	h.until = clk.world(l.Until())
	end := h.until
	if paused && !renewed {
		// Nothing extended the lock in the pause (a renewer may have had
		// an Extend on its way): its end is where it was. After a suspend,
		// the monotonic clock says less time has passed than has.
		if h.until.After(lease) {
			r.violation("c%d.%d: Until moved from %v to %v across a %v", client, k, r.at(lease), r.at(h.until), f.kind)
		}
		if lease.Before(end) {
			end = lease
		}
	}
	if time.Now().After(end) {
		select {
		case <-l.Done():
		default:
			r.violation("c%d.%d: Done not closed %v after the lease's end", client, k, time.Since(end))
		}
	}
	r.write(h, client, k)
	// The write may wait (a store that is slow or paused): the lock may
	// have ended meanwhile (a renewal that failed), or a renewer moved it,
	// and Until says which (seed 5988897912436346571: a write sent at
	// 3.22 s returned at 4.22 s; the renewal had failed at 4.09 s).
	h.until = clk.world(l.Until())
	h.end = time.Now()
	h.released = h.end
	switch {
	case unlock && !renewed && rng4 != nil && rng4.IntN(6) == 0:
		r.unlockExtending(ctx, l, &h, client, k, keysSet, time.Duration(rng4.Int64N(int64(time.Millisecond))))
	case unlock:
		r.unlock(l, &h, client, k, renewed, keysSet)
	}
	r.mu.Lock()
	r.res.Holdings = append(r.res.Holdings, h)
	r.mu.Unlock()
}

// took is the holding of l that worker k of client begins now, and the
// earliest its keys can have been set; it checks the lock's fence and that
// its lease is backed.
func (r *run) took(l *redlock.Lock, client, k int) (holding, time.Time) {
	clk := r.clocks[client]
	h := holding{client: client, worker: k, resources: l.Resources(), got: time.Now(), until: clk.world(l.Until())}
	// The keys behind the lock were set no earlier than a lease before its
	// first Until (a lock passed on in-process has its giver's), or when
	// its round began, up to two node timeouts before it won.
	keysSet := h.until.Add(-r.s.Config.TTL)
	if h.got.Before(keysSet) {
		keysSet = h.got
	}
	keysSet = keysSet.Add(-2 * nodeTimeout) // the round's calls
	r.mu.Lock()
	r.won[l.Token()] = true
	r.held[l.Token()]++
	r.mu.Unlock()
	r.handedLive(h)
	h.fences, h.fenced = l.Fences()
	if slices.ContainsFunc(h.fences, func(f uint64) bool { return f > 1<<53 }) {
		r.hit("a fence above 2^53")
	}
	if !h.fenced {
		r.violation("c%d.%d: a lock of a client WithFence came without a fence", client, k)
	}
	r.event("c%d.%d holds %v fences %v until %v", client, k, h.resources, h.fences, h.until.Sub(r.start))
	r.backed(l, h, client, k)
	return h, keysSet
}

// handedLive checks that h's lock came with lease left: a waiter stopped
// when the lock reached it (handoff-pause, a round's replies read late)
// must find its lease over and not return the lock, for a holder acts at
// once on what it is given.
func (r *run) handedLive(h holding) {
	if !h.until.After(h.got) {
		r.violation("c%d.%d was handed %v at %v with its lease already over (until %v)", h.client, h.worker, h.resources, r.at(h.got), r.at(h.until))
	}
}

// write is h's write of each of its resources through the guard, under
// its fence.
func (r *run) write(h holding, client, k int) {
	for i, res := range h.resources {
		key := "data:" + res
		fc := h.fences[i]
		// A context of its own: the lock's may have ended in a pause, and
		// the write must still reach the guard to be judged.
		sent := time.Now()
		wctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := r.w.guarded(wctx, client, key, fc, func(ctx context.Context, store driver.Conn) error {
			return r.guard.Set(ctx, store, key, fmt.Sprintf("c%d.%d", client, k), fc, 0)
		})
		cancel()
		if err != nil && !errors.Is(err, fence.ErrFenceRejected) && !r.storeCut(err, client, sent) {
			r.violation("c%d.%d: the store failed a write: %v", client, k, err)
		}
		r.event("c%d.%d write %s fence %d: %v", client, k, key, fc, err == nil)
	}
}

// unlockExtending is h's Unlock of l with an Extend of the holder's own
// started `after` before it (a holder whose work loop extends while another
// goroutine unlocks), in its round or after it: once Unlock returned, no late call of that
// Extend may refresh or set the lock's key again (redisson#7272 is that
// bug in Redisson): no master that stayed reachable keeps the token past
// the release's bound (leftNothing).
func (r *run) unlockExtending(ctx context.Context, l *redlock.Lock, h *holding, client, k int, keysSet time.Time, after time.Duration) {
	extended := make(chan error, 1)
	go func() { extended <- l.Extend(ctx, r.s.Config.TTL) }()
	r.nap(client, after) // into the Extend's round, or past it
	// Unlock waits for an Extend it meets: the renewer's bound. An Extend
	// that the holder's own context ended in its round ends the lock
	// (Lock.Extend's doc), and Unlock then says so (seed
	// 5988897912436335285).
	r.unlockIf(l, h, client, k, true, keysSet, func(err error) bool {
		return ctx.Err() != nil && errors.Is(err, redlock.ErrLockNotHeld) && errors.Is(err, ctx.Err())
	})
	err := <-extended
	r.event("c%d.%d extend in flight at Unlock: %v", client, k, kindOf(err))
	r.hit("Extend racing Unlock")
	token := l.Token()
	r.mu.Lock()
	holdings := r.held[token]
	r.mu.Unlock()
	// A lock passed on in-process keeps its token: a later holder's key.
	check := func() {
		r.leftNothing(client, k, "Unlock with an Extend in flight", h.resources, keysSet, func(v string) bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			return v == token && r.held[token] == holdings
		})
	}
	if !r.s.Fair[client] {
		check()
		return
	}
	// A fair client's Unlock may pass the lock to a waiter of its own, who
	// holds nothing yet: one whose mint then gets no reply gives the lock
	// up, and releases its keys, at the counter's timeout (seed
	// 5988897912436333566). A late Extend's key lives a TTL, and is still
	// seen after that.
	r.later.Go(func() {
		time.Sleep(fence.DefaultTimeout)
		check()
	})
}

// unlock is h's Unlock of l, checked: nil for a live lock on masters that
// all answered, and within its bound. It sets h.released.
func (r *run) unlock(l *redlock.Lock, h *holding, client, k int, renewed bool, keysSet time.Time) {
	r.unlockIf(l, h, client, k, renewed, keysSet, nil)
}

// unlockIf is unlock, but an error that excused says the holder's own
// doing explains is not a failure of a live lock's Unlock.
func (r *run) unlockIf(l *redlock.Lock, h *holding, client, k int, renewed bool, keysSet time.Time, excused func(error) bool) {
	unlockAt := time.Now()
	// Live, with time left for the release round (a lock that ended
	// early says so in Until; Done is not asked for, which would start
	// its timer).
	live := r.clocks[client].world(l.Until()).Sub(unlockAt) > 3*nodeTimeout
	err := l.Unlock(context.Background())
	h.released = time.Now()
	if err != nil && live && r.keptBy(client, keysSet, time.Now()) && (excused == nil || !excused(err)) {
		r.violation("c%d.%d: Unlock of a live lock on masters that all answered: %v", client, k, err)
	}
	// The release round, after an Extend of the renewer's in flight
	// (which Unlock waits for): and when that Extend fails, after the
	// release that follows it, which waits for the Extend's late calls
	// (seed 2584754950384275580: 116 ms, with every call 41 ms long). A
	// master's release waits for the acquiring round's call to it: a
	// woken waiter's probed round gives its calls a node timeout and a
	// quarter (1b53e21; seed 325611493264442070: 107 ms, an Unlock just
	// after such a round on a master that hung).
	bound, what := 2*nodeTimeout+nodeTimeout/4, "two and a quarter times"
	if renewed {
		bound, what = 3*nodeTimeout, "three times" // the acquisition's calls ended long before
	}
	if took := time.Since(unlockAt); took > bound+time.Millisecond && !r.pausedIn(client, unlockAt, time.Now()) {
		r.violation("c%d.%d: Unlock took %v, beyond %s the node timeout", client, k, took, what)
	}
	r.event("c%d.%d unlock: %v", client, k, kindOf(err))
}

// backed checks that the lease h was given is backed by the masters: on a
// majority, each of its keys holds its token and outlives Until (read on
// the servers directly, at the instant the lock was handed out). A master
// that restarted, or whose clock stepped or ran fast beyond the allowance,
// while the lock was being taken may have lost or shortened a key then:
// not checked when such a fault was in effect from the start of the
// longest round (two node timeouts back) to the hand-out. One before it
// left the lock's keys alone (they were set after it), and one after it
// does not change what the masters held at the hand-out. The keys behind a
// lock passed on in-process were set, or last extended, when its lease
// began, no earlier than a TTL before Until: the window reaches back there
// too (a master restarted between a Renew's extension and the pass costs
// the passed lock its key, as it cost the lock passed on).
func (r *run) backed(l *redlock.Lock, h holding, client, k int) {
	from := h.got.Add(-2 * nodeTimeout)
	if leased := h.until.Add(-r.s.Config.TTL - 2*nodeTimeout); leased.Before(from) {
		from = leased
	}
	if !r.undisturbed(from, h.got, func(int) bool { return false }, fault.losesKeys) {
		return
	}
	need := len(r.w.Masters)/2 + 1
	for _, res := range h.resources {
		key, n := "lock:"+res, 0
		var seen []string // what each master keeps, for the violation
		for i, m := range r.w.Masters {
			v, ok := m.Get(key)
			switch {
			case !ok:
				seen = append(seen, fmt.Sprintf("m%d: none", i))
			case v != l.Token():
				seen = append(seen, fmt.Sprintf("m%d: another token", i))
			default:
				seen = append(seen, fmt.Sprintf("m%d: until %v", i, r.at(m.ExpiresAt(key))))
			}
			if ok && v == l.Token() && !m.ExpiresAt(key).Before(h.until) {
				n++
			}
		}
		if n < need {
			r.violation("c%d.%d holds %s until %v, but only %d masters keep its key that long (%s)", client, k, res, r.at(h.until), n, strings.Join(seen, ", "))
		}
	}
}

// kindOf names an error by its sentinel, for the trace: no token, no address.
func kindOf(err error) string {
	for _, e := range []error{redlock.ErrNotAcquired, redlock.ErrQuorumUnavailable, redlock.ErrFenceUnavailable,
		redlock.ErrLockNotHeld, redlock.ErrNoProgress, redlock.ErrLockLost, redlock.ErrWrongType, leadership.ErrResigned, context.DeadlineExceeded} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	if err == nil {
		return "ok"
	}
	return "other: " + err.Error()
}
