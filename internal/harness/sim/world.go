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

	mu     sync.Mutex
	paused []*pause // by master: nil, or the backlog of a paused master
	cuts   map[[2]int]cut
	writes []write               // every guarded write, in the order the store applied it
	frozen map[int]chan struct{} // by client: a paused process, closed when it resumes
	// Latency is every call's round trip on a healthy link.
	Latency time.Duration
	// Seed draws each message's time on the wire (see [link.jitter]).
	Seed uint64
	// Wire, when set, hears of every call a master applies (-sim.wire).
	Wire func(format string, args ...any)

	servers []chan job // by master+1; the counter's first
	closed  chan struct{}
	calls   int64 // calls that reached a server (atomic)
}

// pause is a paused master: calls queue up unanswered, and are applied in
// order when it resumes (a stopped process's socket buffer).
type pause struct {
	backlog []func()
}

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
	w := &World{Counter: memredis.New(), Store: memredis.New(), paused: make([]*pause, n), cuts: make(map[[2]int]cut),
		frozen: make(map[int]chan struct{})}
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
func (w *World) Pause(i int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.paused[i] == nil {
		w.paused[i] = &pause{}
	}
}

// Resume applies the backlog of master i in order and lets calls through.
func (w *World) Resume(i int) {
	w.mu.Lock()
	p := w.paused[i]
	w.paused[i] = nil
	w.mu.Unlock()
	if p != nil {
		for _, f := range p.backlog {
			f()
		}
	}
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
	}
}

// Thaw resumes client's process.
func (w *World) Thaw(client int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ch := w.frozen[client]; ch != nil {
		close(ch)
		delete(w.frozen, client)
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
	if c.dropReply && err == nil {
		<-ctx.Done()
		return nil, errTimeout
	}
	if err := wait(ctx, c.delay-c.delay/2+l.jitter(msg, true)); err != nil {
		return nil, err
	}
	return v, err
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
	return l.through(ctx, msgHash(s.Hash(), keys, args...), "script "+s.Hash()[:8]+" "+strings.Join(keys, " "), func(ctx context.Context) (any, error) { return l.conn.Eval(ctx, s, keys, args...) })
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
	if err := wait(ctx, s.l.jitter(msgHash("message", []string{p.Channel}, p.Payload, p.Pong), true)); err != nil {
		return driver.Push{}, err
	}
	return p, nil
}

func (s *subLink) Close() error { return s.sub.Close() }

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
}

// guarded runs one guarded write of fence to key and records whether the
// store admitted it, in the store's order.
// The write takes its time on the wire, as a master's call does.
func (w *World) guarded(ctx context.Context, client int, key string, fence uint64, set func(ctx context.Context, c driver.Conn) error) error {
	l := &link{w: w, client: client, master: storeNode}
	msg := msgHash("guarded", []string{key}, fence)
	if err := wait(ctx, l.jitter(msg, false)); err != nil {
		return err
	}
	w.mu.Lock()
	err := set(ctx, w.Store.Conn())
	w.writes = append(w.writes, write{key: key, fence: fence, admitted: err == nil, at: time.Now()})
	w.mu.Unlock()
	if werr := wait(ctx, l.jitter(msg, true)); werr != nil {
		return werr
	}
	return err
}
