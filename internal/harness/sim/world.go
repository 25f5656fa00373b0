// Package sim is the deterministic simulator of quorumlock: real
// redlock.Clients against simulated masters (internal/harness/memredis, which runs
// the shipped Lua scripts), a simulated fence counter and a guarded store,
// all inside one testing/synctest bubble per schedule, so that time is
// virtual and a schedule of faults is drawn from its seed. A checker reads
// what the clients saw and what the store admitted and names every
// invariant that broke. docs/simulation.md describes the world, the
// faults and the invariants.
//
// It is a test harness: it never runs outside a test binary.
package sim

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/internal/harness/memredis"
)

// errTimeout is what a link returns for a call whose request or reply the
// network lost: the caller's deadline passed with no answer.
var errTimeout = errors.New("sim: i/o timeout (lost on the network)")

// World is the simulated servers and the network between each client and
// each of them.
type World struct {
	Masters []*memredis.Server
	Counter *memredis.Server // the fence counter's node
	Store   *memredis.Server // the guarded data
	// Twin is an unfenced store beside the guarded one: every write that
	// reaches the store is applied to it too, as a plain SET of its fence,
	// so that what the guard refuses shows here as a stale write accepted.
	Twin *memredis.Server

	mu     sync.Mutex
	paused []*pause // by master: nil, or the backlog of a paused master
	cuts   map[[2]int]cut
	writes []write         // every guarded write, in the order the store applied it
	twin   []write         // the same writes as the unfenced twin applied them (admitted: all)
	store  *pause          // nil, or the backlog of the paused store
	armed  map[int][]armed // by client: pauses waiting for a round's replies or a handoff
	// Frozen, when set, hears of a pause of a client that the world took
	// itself (an armed one): from, to, and what it met.
	Frozen func(client int, from, to time.Time, what string)
	// Hit, when set, counts a named rare path the network or a server saw.
	Hit     func(path string)
	frozen  map[int]chan struct{} // by client: a paused process, closed when it resumes
	stopped atomic.Int32          // len(frozen), read without mu
	nArmed  atomic.Int32          // pauses armed and not yet taken, read without mu
	// Latency is every call's round trip on a healthy link.
	Latency time.Duration
	// Seed draws each message's time on the wire (see [link.jitter]).
	Seed uint64
	// Wire, when set, hears of every call a master applies (-sim.wire).
	Wire func(format string, args ...any)
	// Hung, when set, hears of a master the world hung itself as a probe
	// reached it (probe-hang): which, and for how long.
	Hung func(master int, lasts time.Duration)

	hangProbes atomic.Bool // a probe-hang's window is open

	servers []chan job // by master+1; the counter's first
	closed  chan struct{}
	calls   int64 // calls that reached a server (atomic)
}

// pause is a paused master: calls queue up unanswered, and are applied in
// order when it resumes (a stopped process's socket buffer).
type pause struct {
	backlog []func()
	by      stops // what stops it: it resumes when none does
}

// stops is what keeps a master paused: a paused fault, a probe-hang, or
// both (the two overlap, and each ends on its own).
type stops uint8

const (
	byFault stops = 1 << iota
	byHang
)

// cut is what the network does to the calls of one client to one master.
type cut struct {
	delay     time.Duration // every call takes this long more, half each way
	vary      time.Duration // ... and up to this much more, drawn per call (a spike)
	dropReply bool          // applied, but the caller never hears back
	dropAsk   bool          // never arrives
}

// NewWorld makes n masters, a counter and a store; call it in the bubble,
// and Close it there.
func NewWorld(n int) *World {
	w := &World{Counter: memredis.New(), Store: memredis.New(), Twin: memredis.New(), paused: make([]*pause, n), cuts: make(map[[2]int]cut),
		frozen: make(map[int]chan struct{}), armed: make(map[int][]armed)}
	for range n {
		w.Masters = append(w.Masters, memredis.New())
	}
	w.servers, w.closed = make([]chan job, n+1), make(chan struct{})
	for i := range w.servers {
		w.servers[i] = make(chan job)
		go serve(w.servers[i], w.closed)
	}
	return w
}

// job is one call for a server's goroutine.
type job struct {
	ctx   context.Context
	f     func(ctx context.Context) (any, error)
	reply chan<- result
}

type result struct {
	v   any
	err error
}

// serve runs the calls of one server, one at a time, as Redis does, on one
// goroutine whose stack has grown to what the script interpreter needs
// once: run on the callers' goroutines, fresh ones each (a round's), the
// calls spent a sixth of the simulator's time growing stacks.
func serve(jobs <-chan job, closed <-chan struct{}) {
	for {
		select {
		case j := <-jobs:
			v, err := j.f(j.ctx)
			j.reply <- result{v, err}
		case <-closed:
			return
		}
	}
}

// exec runs f on master's goroutine (counterNode: the counter's); after
// Close, on the caller's.
func (w *World) exec(master int, ctx context.Context, f func(ctx context.Context) (any, error)) (any, error) {
	atomic.AddInt64(&w.calls, 1)
	reply := make(chan result, 1)
	select {
	case w.servers[master+1] <- job{ctx, f, reply}:
	case <-w.closed:
		return f(ctx)
	}
	r := <-reply
	return r.v, r.err
}

// Close stops the servers' goroutines.
func (w *World) Close() { close(w.closed) }

// Links returns client's connections to every master, through the network.
func (w *World) Links(client int) []driver.Conn {
	out := make([]driver.Conn, len(w.Masters))
	for i, m := range w.Masters {
		out[i] = &link{w: w, client: client, master: i, conn: m.Conn().(full)}
	}
	return out
}

// CounterLink returns client's connection to the fence counter's node:
// never cut, but its messages take seeded times on the wire as the
// masters' do.
func (w *World) CounterLink(client int) driver.Conn {
	return &link{w: w, client: client, master: counterNode, conn: w.Counter.Conn().(full)}
}

// counterNode and storeNode are the master numbers of the links to the
// counter's node and to the guarded store.
const (
	counterNode = -1
	storeNode   = -2
)

// Pause stops master i: its calls wait, and are applied when it resumes.
func (w *World) Pause(i int) { w.stop(i, byFault) }

// Resume applies the backlog of master i in order and lets calls through,
// unless a hang holds it still.
func (w *World) Resume(i int) { w.start(i, byFault) }

// stop stops master i for why; it reports whether why held it already.
func (w *World) stop(i int, why stops) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.paused[i] == nil {
		w.paused[i] = &pause{}
	}
	held := w.paused[i].by&why != 0
	w.paused[i].by |= why
	return held
}

// start ends why's stop of master i; once nothing stops it, its backlog
// is applied in order.
func (w *World) start(i int, why stops) {
	w.mu.Lock()
	p := w.paused[i]
	if p == nil {
		w.mu.Unlock()
		return
	}
	p.by &^= why
	if p.by != 0 {
		w.mu.Unlock()
		return
	}
	w.paused[i] = nil
	w.mu.Unlock()
	for _, f := range p.backlog {
		f()
	}
}

// probeHangOdds: in a probe-hang's window, one probe in this many hangs
// the master it reaches.
const probeHangOdds = 4

// hangOn hangs master as a probe (msg) reaches it, in a probe-hang's window
// and when the draw (from the seed, the instant and the call, as jitter's)
// says so: for one to four node timeouts its calls, this one first, queue
// unanswered, and are applied in order at its resume, as a paused or hung
// process's are. A master already hung stays as it is.
func (w *World) hangOn(master int, msg uint64) {
	if !w.hangProbes.Load() {
		return
	}
	x := mix(w.Seed ^ msg ^ uint64(time.Now().UnixNano())*0x9e3779b97f4a7c15 ^ uint64(master+2)<<40 ^ 0x4a46)
	if x%probeHangOdds != 0 {
		return
	}
	lasts := nodeTimeout + time.Duration(x/probeHangOdds%uint64(3*nodeTimeout))
	if w.stop(master, byHang) {
		return
	}
	if w.Hung != nil {
		w.Hung(master, lasts)
	}
	w.hit("probe-hang: a master hung as a probe reached it")
	go func() {
		time.Sleep(lasts)
		w.start(master, byHang)
	}()
}

// Freeze stops client's process: a call it makes to a master from now on
// waits until [World.Thaw], then finds its deadline passed or goes out
// late, as the calls of a stopped process do (its timers cannot fire
// while it is stopped).
func (w *World) Freeze(client int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.frozen[client] == nil {
		w.frozen[client] = make(chan struct{})
		w.stopped.Add(1)
	}
}

// Thaw resumes client's process.
func (w *World) Thaw(client int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ch := w.frozen[client]; ch != nil {
		close(ch)
		delete(w.frozen, client)
		w.stopped.Add(-1)
	}
}

// Cut sets what the network does to client's calls to master i.
func (w *World) Cut(client, i int, c cut) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c == (cut{}) {
		delete(w.cuts, [2]int{client, i})
		return
	}
	w.cuts[[2]int{client, i}] = c
}

// full is what memredis's connections do; a link passes on all of it.
type full interface {
	driver.Conn
	driver.Subscriber
	driver.Inspector
	driver.Describer
}

// link is one client's connection to one master, through the network.
type link struct {
	w      *World
	client int
	master int
	conn   full

	// Lock-free, as the rest of a link's bookkeeping: a mutex that the
	// calls of one instant contend for (a burst's hundred callers of one
	// client) parks one of them, and the order they then run in, and so
	// the trace, is the scheduler's (crowd seed 19 parted so).
	failing atomic.Int64 // since when (ns) no call of the client's got an answer here; 0: the last did
	lost    sync.Map     // by a hash of each release sent (uint64): whether it got no reply (bool)
}

// probeAfter is how long a master may leave a client's calls unanswered
// before the client's breaker lets through only a probe now and then
// (redlock/internal/node: four node timeouts).
const probeAfter = 4 * nodeTimeout

// sending notes a call about to go out: a call to a master that has not
// answered for probeAfter is the breaker's probe.
func (l *link) sending() {
	if l.master < 0 {
		return
	}
	since := l.failing.Load()
	if since != 0 && time.Now().UnixNano()-since >= int64(probeAfter) {
		l.w.hit("breaker probe: a call to a master silent for four node timeouts")
	}
}

// answered notes whether a call got its answer.
func (l *link) answered(ok bool) {
	if ok {
		if l.failing.Load() != 0 {
			l.failing.Store(0)
		}
		return
	}
	l.failing.CompareAndSwap(0, time.Now().UnixNano())
}

// maxJitter bounds the part of a message's time on the wire drawn from the
// seed: a few µs, as a local network's spread.
const maxJitter = 20 * time.Microsecond

// jitter is the time on the wire of a message: at least 1 ns, at most
// maxJitter, drawn from the world's seed, the link, the virtual instant
// it is sent and what it says (msg, a hash of the call), and the direction.
// The scheduler runs the goroutines that wake at one virtual instant in an
// order of its own; a message's time drawn from what it is rather than
// from the order of the draws keeps two messages from arriving at one
// instant, and the order in which masters apply calls (and so a seed's
// trace) the same in every replay.
func (l *link) jitter(msg uint64, back bool) time.Duration {
	x := l.w.Seed ^ msg ^ uint64(time.Now().UnixNano())*0x9e3779b97f4a7c15 ^ uint64(l.client+1)<<32 ^ uint64(l.master+2)<<40
	if back {
		x ^= 1 << 63
	}
	return 1 + time.Duration(mix(x)%uint64(maxJitter))
}

// spread is the part of a spike's delay drawn for one call: up to vary,
// from what jitter draws from, so that a call sent again later (a retried
// release) meets another delay.
func (l *link) spread(msg uint64, vary time.Duration) time.Duration {
	x := l.w.Seed ^ msg ^ uint64(time.Now().UnixNano())*0x9e3779b97f4a7c15 ^ uint64(l.client+1)<<32 ^ uint64(l.master+2)<<40
	return time.Duration(mix(x^0x5b1e) % uint64(vary+1))
}

// mix is splitmix64's finaliser.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// through runs f as the network and the master's state allow: delayed,
// lost on the way, applied but unanswered, or queued behind a pause. msg
// is a hash of the call (see [link.jitter]).
func (l *link) through(ctx context.Context, msg uint64, what string, f func(ctx context.Context) (any, error)) (any, error) {
	return l.throughAs(ctx, msg, what, false, f)
}

// throughAs is through for a call that is a plain waiter's probe or not:
// a probe may hang its master (probe-hang).
func (l *link) throughAs(ctx context.Context, msg uint64, what string, probe bool, f func(ctx context.Context) (any, error)) (any, error) {
	l.sending()
	v, err := l.deliver(ctx, msg, what, probe, f)
	l.answered(!errors.Is(err, errTimeout) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && !errors.Is(err, memredis.ErrDown))
	return v, err
}

// deliver is through's delivery of one call.
func (l *link) deliver(ctx context.Context, msg uint64, what string, probe bool, f func(ctx context.Context) (any, error)) (any, error) {
	if l.w.Wire != nil {
		g := f
		f = func(ctx context.Context) (any, error) {
			v, err := g(ctx)
			l.w.Wire("wire c%d m%d %016x %s: %v %v", l.client, l.master, msg, what, v, err)
			return v, err
		}
	}
	l.w.mu.Lock()
	frozen := l.w.frozen[l.client]
	l.w.mu.Unlock()
	if frozen != nil {
		<-frozen
		// The calls of a process that resumes go on one by one, each at
		// an instant of its own (see jitter), not all at the resume.
		time.Sleep(l.jitter(msg, false))
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	l.w.mu.Lock()
	c := l.w.cuts[[2]int{l.client, l.master}]
	l.w.mu.Unlock()
	c.delay += l.w.Latency
	if c.vary > 0 {
		c.delay += l.spread(msg, c.vary)
	}
	// A delay is half on the way there, half on the way back: the master
	// applies the call before the caller hears of it.
	if err := wait(ctx, c.delay/2+l.jitter(msg, false)); err != nil {
		return nil, err
	}
	if c.dropAsk {
		<-ctx.Done()
		return nil, errTimeout
	}
	if probe {
		l.w.hangOn(l.master, msg)
	}
	l.w.mu.Lock()
	if p := l.paused(); p != nil {
		// The request sits in the stopped server's buffer: it is applied
		// at the resume, whoever still waits for it.
		type reply struct {
			v   any
			err error
		}
		done := make(chan reply, 1)
		p.backlog = append(p.backlog, func() {
			v, err := f(context.Background())
			done <- reply{v, err}
		})
		l.w.mu.Unlock()
		select {
		case r := <-done:
			// The backlog is applied at one instant; its replies reach
			// their callers each at an instant of its own.
			if err := wait(ctx, c.delay-c.delay/2+l.jitter(msg, true)); err != nil {
				return nil, err
			}
			return r.v, r.err
		case <-ctx.Done():
			return nil, errTimeout
		}
	}
	l.w.mu.Unlock()
	v, err := l.w.exec(l.master, ctx, f)
	if l.master >= 0 && l.w.trip(l.client, roundPause, "a round's replies") {
		l.w.hit("round-pause: a client stopped between its calls and their replies")
	}
	if c.dropReply && err == nil {
		if l.master == counterNode {
			l.w.hit("mint-lost-reply: a mint applied, its reply lost")
		} else {
			l.w.hit("ghost write: a call applied, its reply lost")
		}
		<-ctx.Done()
		return nil, errTimeout
	}
	if l.w.held(l.client) {
		// A stopped process reads no reply: this one waited in its
		// socket buffer, and is read at the resume, whether or not the
		// caller's deadline passed meanwhile (its timer fired in the
		// pause, as a bubble's timers do).
		return v, err
	}
	if err := wait(ctx, c.delay-c.delay/2+l.jitter(msg, true)); err != nil {
		return nil, err
	}
	return v, err
}

// armed is a pause of a client's process that the world takes itself, at
// the first moment of its kind from when it was armed: a reply of a call
// to a master reaching the client (roundPause), or the lock handed to a
// waiter of the client (handoffPause).
type armed struct {
	kind  kind
	from  time.Time
	lasts time.Duration
}

// Arm arms a pause of client's process of kind k (roundPause or
// handoffPause) from now, lasting lasts once taken.
func (w *World) Arm(client int, k kind, lasts time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed[client] = append(w.armed[client], armed{kind: k, from: time.Now(), lasts: lasts})
	w.nArmed.Add(1)
}

// trip takes a pause of kind k armed for client, unless its process is
// stopped already: it stops the process (its calls wait, its replies are
// not read) for the pause's length, and reports whether it did.
func (w *World) trip(client int, k kind, what string) bool {
	if w.nArmed.Load() == 0 {
		return false // nothing armed: no lock taken (see link)
	}
	w.mu.Lock()
	as := w.armed[client]
	i := slices.IndexFunc(as, func(a armed) bool { return a.kind == k })
	if i < 0 || w.frozen[client] != nil {
		w.mu.Unlock()
		return false
	}
	a := as[i]
	w.armed[client] = slices.Delete(slices.Clone(as), i, i+1)
	w.nArmed.Add(-1)
	w.frozen[client] = make(chan struct{})
	w.stopped.Add(1)
	w.mu.Unlock()
	from := time.Now()
	if w.Frozen != nil {
		w.Frozen(client, from, from.Add(a.lasts), fmt.Sprintf("%v at %s", k, what))
	}
	go func() {
		time.Sleep(a.lasts)
		w.Thaw(client)
	}()
	return true
}

// held waits, if client's process is stopped, until it resumes, and
// reports whether it waited.
func (w *World) held(client int) bool {
	if w.stopped.Load() == 0 {
		return false // no process stopped: no lock taken (see link)
	}
	w.mu.Lock()
	ch := w.frozen[client]
	w.mu.Unlock()
	if ch == nil {
		return false
	}
	<-ch
	return true
}

// hit counts path, if the world is told to.
func (w *World) hit(path string) {
	if w.Hit != nil {
		w.Hit(path)
	}
}

// paused is the backlog of the link's master if it is paused; w.mu is held.
func (l *link) paused() *pause {
	if l.master < 0 {
		return nil
	}
	return l.w.paused[l.master]
}

// msgHash is a hash of a call: its command and its arguments.
func msgHash(cmd string, keys []string, args ...any) uint64 {
	h := fnv.New64a()
	io.WriteString(h, cmd)
	for _, k := range keys {
		h.Write([]byte{0})
		io.WriteString(h, k)
	}
	var b [20]byte
	for _, a := range args {
		h.Write([]byte{1})
		switch a := a.(type) {
		case string:
			io.WriteString(h, a)
		case int:
			h.Write(strconv.AppendInt(b[:0], int64(a), 10))
		case int64:
			h.Write(strconv.AppendInt(b[:0], a, 10))
		case uint64:
			h.Write(strconv.AppendUint(b[:0], a, 10))
		case time.Duration:
			h.Write(strconv.AppendInt(b[:0], int64(a), 10))
		case bool:
			h.Write(strconv.AppendBool(b[:0], a))
		default:
			fmt.Fprint(h, a)
		}
	}
	return h.Sum64()
}

// wait sleeps d unless ctx ends first.
func wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// attempt is the tokens one call of a worker sent to lock keys (SET NX's
// value, a script's first argument), so that what it left behind can be
// found on the masters. It rides on the call's context, which the client
// passes on to every master call of the attempt and to its undo.
type attempt struct {
	mu     sync.Mutex
	tokens map[string]bool
	// A worker's Lock, LockAll or Do, whose attempts the Attempt hook
	// checks one by one (attempted): which worker of its client.
	each   bool
	worker int
}

type attemptKey struct{}

func withAttempt(ctx context.Context) (context.Context, *attempt) {
	a := &attempt{tokens: make(map[string]bool)}
	return context.WithValue(ctx, attemptKey{}, a), a
}

func (a *attempt) sent(token string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.tokens[token] = true
}

// rounds is how many tokens were sent under the attempt's context: the
// rounds a TryLock made.
func (a *attempt) rounds() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.tokens)
}

func (a *attempt) has(token string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.tokens[token]
}

// record notes a token sent to a lock key under an attempt's context.
func record(ctx context.Context, key string, token any) {
	if a, ok := ctx.Value(attemptKey{}).(*attempt); ok && strings.HasPrefix(key, "lock:") {
		if s, ok := token.(string); ok {
			a.sent(s)
		} else {
			a.sent(fmt.Sprint(token))
		}
	}
}

func (l *link) SetNX(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	record(ctx, key, value)
	v, err := l.through(ctx, msgHash("set", []string{key}, value, ttl), "SET NX "+key, func(ctx context.Context) (any, error) { return l.conn.SetNX(ctx, key, value, ttl) })
	ok, _ := v.(bool)
	return ok, err
}

func (l *link) Eval(ctx context.Context, s *driver.Script, keys []string, args ...any) (any, error) {
	if len(keys) > 0 && len(args) > 0 {
		record(ctx, keys[0], args[0])
	}
	handoff := isHandoff(s)
	msg := msgHash(s.Hash(), keys, args...)
	if isRelease(s) {
		if lost, _ := l.lost.Load(msg); lost == true {
			l.w.hit("lost release retried: a release sent again")
		}
		v, err := l.through(ctx, msg, "script "+s.Hash()[:8]+" "+strings.Join(keys, " "), func(ctx context.Context) (any, error) { return l.conn.Eval(ctx, s, keys, args...) })
		l.lost.Store(msg, errors.Is(err, errTimeout) || errors.Is(err, context.DeadlineExceeded))
		return v, err
	}
	return l.throughAs(ctx, msg, "script "+s.Hash()[:8]+" "+strings.Join(keys, " "), isProbe(s), func(ctx context.Context) (any, error) {
		v, err := l.conn.Eval(ctx, s, keys, args...)
		if handoff && (v == int64(2) || v == int64(3)) {
			// The key handed to a waiter of this client in the round:
			// the process stops before the round's replies are read.
			if l.w.trip(l.client, handoffPause, "a handoff round") {
				l.w.hit("handoff to a paused waiter")
			}
		}
		return v, err
	})
}

// handoffMark is in the source of the fair client's handoff script
// (redlock/internal/fair/scripts/handoff.lua), which the simulator may not
// import: its replies 2 and 3 hand the key to a waiter of the caller.
const handoffMark = "The release that only a fair client sends"

// releaseMark begins the release script (redlock/scripts/release.lua).
const releaseMark = "-- The release of a lock (queue.lua's release_key"

// probeMark begins the plain waiter's probe script
// (redlock/internal/plain/scripts/probe.lua): its first call of an attempt
// woken by a release, to the master every waiter of the resource asks first.
const probeMark = "-- The first call of an attempt woken by a release"

var handoffScripts sync.Map // *driver.Script -> bool

var releaseScripts sync.Map // *driver.Script -> bool

var probeScripts sync.Map // *driver.Script -> bool

func isHandoff(s *driver.Script) bool { return marked(&handoffScripts, s, handoffMark) }

func isRelease(s *driver.Script) bool { return marked(&releaseScripts, s, releaseMark) }

func isProbe(s *driver.Script) bool { return marked(&probeScripts, s, probeMark) }

// marked reports whether s's source holds mark, once per script.
func marked(cache *sync.Map, s *driver.Script, mark string) bool {
	if v, ok := cache.Load(s); ok {
		return v.(bool)
	}
	is := strings.Contains(s.Source(), mark)
	cache.Store(s, is)
	return is
}

// Subscribe is not cut: push wake-up is an optimisation the timer backs up,
// and a lost release message only costs a waiter its wait. Its commands and
// messages take their seeded times on the wire as calls do, so that a
// message reaches the clients subscribed at distinct instants, and a
// subscription is in place at an instant of its own.
func (l *link) Subscribe(ctx context.Context) driver.Subscription {
	return &subLink{l: l, sub: l.conn.Subscribe(ctx)}
}

// subLink is a subscription through the network.
type subLink struct {
	l   *link
	sub driver.Subscription
}

// The client sends channels in its map's order: the hash is of the set.
func (s *subLink) Subscribe(ctx context.Context, channels ...string) error {
	if err := wait(ctx, s.l.jitter(msgHash("subscribe", sorted(channels)), false)); err != nil {
		return err
	}
	return s.sub.Subscribe(ctx, channels...)
}

func (s *subLink) Unsubscribe(ctx context.Context, channels ...string) error {
	if err := wait(ctx, s.l.jitter(msgHash("unsubscribe", sorted(channels)), false)); err != nil {
		return err
	}
	return s.sub.Unsubscribe(ctx, channels...)
}

func (s *subLink) Ping(ctx context.Context, payload string) error {
	if err := wait(ctx, s.l.jitter(msgHash("ping", nil, payload), false)); err != nil {
		return err
	}
	return s.sub.Ping(ctx, payload)
}

func (s *subLink) Receive(ctx context.Context) (driver.Push, error) {
	p, err := s.sub.Receive(ctx)
	if err != nil {
		// A reset (the master restarted) reaches each client at an
		// instant of its own too.
		time.Sleep(s.l.jitter(msgHash("error", nil, err.Error()), true))
		return p, err
	}
	if strings.HasPrefix(p.Channel, handoffPrefix) && s.l.w.trip(s.l.client, handoffPause, "a handoff message") {
		// The lock reserved for a waiter of this client in another's
		// Unlock: the process stops as the message reaches it.
		s.l.w.hit("handoff to a paused waiter")
	}
	if s.l.w.held(s.l.client) {
		return p, nil
	}
	if err := wait(ctx, s.l.jitter(msgHash("message", []string{p.Channel}, p.Payload, p.Pong), true)); err != nil {
		return driver.Push{}, err
	}
	return p, nil
}

func (s *subLink) Close() error { return s.sub.Close() }

// handoffPrefix begins the channels on which a release names the waiter the
// key is reserved for (push.HandoffChannel: "lockp:" tag ":" key).
const handoffPrefix = "lockp:"

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func (l *link) Info(ctx context.Context, section string) (string, error) {
	v, err := l.through(ctx, msgHash("info", nil, section), "INFO", func(ctx context.Context) (any, error) { return l.conn.Info(ctx, section) })
	s, _ := v.(string)
	return s, err
}

func (l *link) Time(ctx context.Context) (time.Time, error) {
	v, err := l.through(ctx, msgHash("time", nil), "TIME", func(ctx context.Context) (any, error) { return l.conn.Time(ctx) })
	t, _ := v.(time.Time)
	return t, err
}

func (l *link) ConfigGet(ctx context.Context, p string) (map[string]string, error) {
	v, err := l.through(ctx, msgHash("config", nil, p), "CONFIG GET", func(ctx context.Context) (any, error) { return l.conn.ConfigGet(ctx, p) })
	m, _ := v.(map[string]string)
	return m, err
}

// Describe gives no address: the client would dial it to diagnose a master
// that does not answer, and a bubble has no network.
func (l *link) Describe() driver.Description {
	d := l.conn.Describe()
	d.Addr = ""
	return d
}

// write is one guarded write as the store applied it.
type write struct {
	key      string
	fence    uint64
	admitted bool
	at       time.Time
	client   int
	late     bool // its sender had given up on it (its deadline passed) when it landed
}

// guarded runs one guarded write of fence to key through client's link to
// the store, and records whether the store admitted it, in the store's
// order; the unfenced twin applies it too. The link is cut as a master's
// is (World.Cut with storeNode): delayed, half each way, lost on the way,
// or applied unanswered; the store may be paused (PauseStore). A write in
// flight lands whether or not its sender still waits for it, as a packet
// on the wire does: a write sent while its lease was valid can land after
// the next holder's, and the guard must refuse it.
func (w *World) guarded(ctx context.Context, client int, key string, fence uint64, set func(ctx context.Context, c driver.Conn) error) error {
	l := &link{w: w, client: client, master: storeNode}
	msg := msgHash("guarded", []string{key}, fence)
	w.held(client) // a stopped process sends nothing
	w.mu.Lock()
	c := w.cuts[[2]int{client, storeNode}]
	w.mu.Unlock()
	if c.delay > 0 {
		w.hit("store-delayed: a write slowed on its way")
	}
	// No latency of the schedule's: the store is near its writers, as it
	// was before its link could be cut (a write then took only its
	// jitter; the schedules' timing stays as it was).
	landed := make(chan error, 1)
	apply := func() {
		w.mu.Lock()
		err := set(context.Background(), w.Store.Conn())
		wr := write{key: key, fence: fence, admitted: err == nil, at: time.Now(), client: client, late: ctx.Err() != nil}
		w.writes = append(w.writes, wr)
		wr.admitted = true
		w.Twin.Set(key, strconv.FormatUint(fence, 10), 0)
		w.twin = append(w.twin, wr)
		w.mu.Unlock()
		if wr.late {
			w.hit("in-flight store write: landed after its sender gave up")
		}
		landed <- err
	}
	w.mu.Lock()
	stopped := w.store != nil
	w.mu.Unlock()
	if c == (cut{}) && !stopped {
		// A healthy link, as before it could be cut: the writer's own
		// goroutine carries the write (one more goroutine per write
		// changed the order of the goroutines of an instant, and the
		// crowd schedules' traces).
		if err := wait(ctx, l.jitter(msg, false)); err != nil {
			return errTimeout
		}
		apply()
		err := <-landed
		if werr := wait(ctx, l.jitter(msg, true)); werr != nil {
			return errTimeout
		}
		return err
	}
	go func() {
		time.Sleep(c.delay/2 + l.jitter(msg, false))
		if c.dropAsk {
			w.hit("store-lost-ask: a write lost on the way")
			return
		}
		w.mu.Lock()
		if p := w.store; p != nil {
			p.backlog = append(p.backlog, apply)
			w.mu.Unlock()
			w.hit("store-paused: a write queued at the stopped store")
			return
		}
		w.mu.Unlock()
		apply()
	}()
	select {
	case err := <-landed:
		if c.dropReply {
			w.hit("store-lost-reply: a write applied, its reply lost")
			<-ctx.Done()
			return errTimeout
		}
		if werr := wait(ctx, c.delay-c.delay/2+l.jitter(msg, true)); werr != nil {
			return errTimeout
		}
		return err
	case <-ctx.Done():
		return errTimeout
	}
}

// PauseStore stops the store: writes queue up, and are applied in order
// when it resumes, whoever still waits for them.
func (w *World) PauseStore() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.store == nil {
		w.store = &pause{}
	}
}

// ResumeStore applies the store's backlog and lets writes through.
func (w *World) ResumeStore() {
	w.mu.Lock()
	p := w.store
	w.store = nil
	w.mu.Unlock()
	if p != nil {
		for _, f := range p.backlog {
			f()
		}
	}
}

// staleOnTwin counts the writes the unfenced twin accepted with a fence
// below one it had applied to the same key before: the writes the guard
// is there to refuse.
func staleOnTwin(twin []write) int {
	top, n := make(map[string]uint64), 0
	for _, t := range twin {
		if t.fence < top[t.key] {
			n++
		}
		top[t.key] = max(top[t.key], t.fence)
	}
	return n
}
