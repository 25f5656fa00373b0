// Package sim is the deterministic simulator of quorumlock: real
// redlock.Clients against simulated masters (internal/memredis, which runs
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
	"strings"
	"sync"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/internal/memredis"
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
}

// pause is a paused master: calls queue up unanswered, and are applied in
// order when it resumes (a stopped process's socket buffer).
type pause struct {
	backlog []func()
}

// cut is what the network does to the calls of one client to one master.
type cut struct {
	delay     time.Duration // every call takes this long more, half each way
	dropReply bool          // applied, but the caller never hears back
	dropAsk   bool          // never arrives
}

// NewWorld makes n masters, a counter and a store; call it in the bubble.
func NewWorld(n int) *World {
	w := &World{Counter: memredis.New(), Store: memredis.New(), paused: make([]*pause, n), cuts: make(map[[2]int]cut),
		frozen: make(map[int]chan struct{})}
	for range n {
		w.Masters = append(w.Masters, memredis.New())
	}
	return w
}

// Links returns client's connections to every master, through the network.
func (w *World) Links(client int) []driver.Conn {
	out := make([]driver.Conn, len(w.Masters))
	for i, m := range w.Masters {
		out[i] = &link{w: w, client: client, master: i, conn: m.Conn().(full)}
	}
	return out
}

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

// through runs f as the network and the master's state allow: delayed,
// lost on the way, applied but unanswered, or queued behind a pause.
func (l *link) through(ctx context.Context, f func(ctx context.Context) (any, error)) (any, error) {
	l.w.mu.Lock()
	frozen := l.w.frozen[l.client]
	l.w.mu.Unlock()
	if frozen != nil {
		<-frozen
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	l.w.mu.Lock()
	c := l.w.cuts[[2]int{l.client, l.master}]
	l.w.mu.Unlock()
	c.delay += l.w.Latency
	// A delay is half on the way there, half on the way back: the master
	// applies the call before the caller hears of it.
	if err := wait(ctx, c.delay/2); err != nil {
		return nil, err
	}
	if c.dropAsk {
		<-ctx.Done()
		return nil, errTimeout
	}
	l.w.mu.Lock()
	if p := l.w.paused[l.master]; p != nil {
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
			return r.v, r.err
		case <-ctx.Done():
			return nil, errTimeout
		}
	}
	l.w.mu.Unlock()
	v, err := f(ctx)
	if c.dropReply && err == nil {
		<-ctx.Done()
		return nil, errTimeout
	}
	if err := wait(ctx, c.delay-c.delay/2); err != nil {
		return nil, err
	}
	return v, err
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
	v, err := l.through(ctx, func(ctx context.Context) (any, error) { return l.conn.SetNX(ctx, key, value, ttl) })
	ok, _ := v.(bool)
	return ok, err
}

func (l *link) Eval(ctx context.Context, s *driver.Script, keys []string, args ...any) (any, error) {
	if len(keys) > 0 && len(args) > 0 {
		record(ctx, keys[0], args[0])
	}
	return l.through(ctx, func(ctx context.Context) (any, error) { return l.conn.Eval(ctx, s, keys, args...) })
}

// Subscribe is not cut: push wake-up is an optimisation the timer backs up,
// and a lost release message only costs a waiter its wait.
func (l *link) Subscribe(ctx context.Context) driver.Subscription { return l.conn.Subscribe(ctx) }

func (l *link) Info(ctx context.Context, section string) (string, error) {
	v, err := l.through(ctx, func(ctx context.Context) (any, error) { return l.conn.Info(ctx, section) })
	s, _ := v.(string)
	return s, err
}

func (l *link) Time(ctx context.Context) (time.Time, error) {
	v, err := l.through(ctx, func(ctx context.Context) (any, error) { return l.conn.Time(ctx) })
	t, _ := v.(time.Time)
	return t, err
}

func (l *link) ConfigGet(ctx context.Context, p string) (map[string]string, error) {
	v, err := l.through(ctx, func(ctx context.Context) (any, error) { return l.conn.ConfigGet(ctx, p) })
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
func (w *World) guarded(ctx context.Context, key string, fence uint64, set func(ctx context.Context, c driver.Conn) error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	err := set(ctx, w.Store.Conn())
	w.writes = append(w.writes, write{key: key, fence: fence, admitted: err == nil, at: time.Now()})
	return err
}
