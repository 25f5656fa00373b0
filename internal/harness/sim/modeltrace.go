package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/fence"
	"quorumlock.dev/internal/seam"
	"quorumlock.dev/redlock"
)

// ModelStep is one step of a model-trace schedule, in the vocabulary of
// model/check.go (its Kind's names): what a master applied, what a client
// heard and did, what the counter and the store did. At is the world's
// time from the schedule's start; Mono the client's monotonic clock (a
// suspend lags it); Until a lease's end on that clock.
type ModelStep struct {
	Kind   string
	At     time.Duration
	Mono   time.Duration
	Client int
	Master int
	Token  string
	Ok     bool
	Fence  uint64
	Until  time.Duration
	Clock  uint64
	Waiter string // a fair waiter's entry on the masters (its id)
	From   string // hand: what the key held before
	Stamp  uint64 // a fair waiter's arrival stamp
	Claim  bool   // a fair attempt that queued with a claim
}

// ModelTrace is what PlayModelTrace recorded.
type ModelTrace struct {
	Steps []ModelStep
	TTL   time.Duration
	// DriftFactor and DriftConstant are the clients' (WithDrift): the
	// model's drift bound is clockdrift.Allowance of TTL with them.
	DriftFactor   float64
	DriftConstant time.Duration
	// Pauses: a client paused between its look at its lock and its write.
	Pauses bool
	// Wire is the most a fenced write takes to reach the store.
	Wire time.Duration
	// GuardLag is how long after a restart the clients' restart guard may
	// still count the master's vote: it samples INFO every restartEvery,
	// each sample within a node timeout.
	GuardLag time.Duration
	// EntryTTL is the fair clients' entry TTL (0: no fair clients);
	// EntryDrift how far a master's clock may move an entry's end.
	EntryTTL, EntryDrift time.Duration
	Faults               []string
	Errors               []string // what went wrong in the harness itself (none expected)
}

// The model-trace schedules: the scope of model/redlock.pml and fence.pml.
const (
	modelMasters = 3
	modelClients = 2
	modelCycles  = 3
	modelTTL     = time.Second
)

// restartEvery is the clients' restart guard's interval (WithRestartGuard).
const restartEvery = 100 * time.Millisecond

// The clients' drift allowance: redlock's defaults, set explicitly so
// that the model's checker reads them from here.
const (
	modelDriftFactor   = 0.01
	modelDriftConstant = 2 * time.Millisecond
)

// PlayModelTrace plays the model-trace schedule of seed and records its
// steps: 3 masters, 2 clients of one worker each, 3 lock cycles each on one
// resource (TryLock or Lock; an Extend in one of three, half of them at the
// lease's last moment; a look at Lock.Context before the fenced write;
// Unlock), and up to 3 faults of the kinds the model has: lost requests and
// replies and late calls (late SET NX), a paused master, a master restarted
// empty, a master's clock fast within the drift allowance, a lost counter
// key, a client paused between its look and its write, a client's machine
// suspended before its look.
// Call it in a synctest bubble, with boottime.Virtual in effect.
//
// The steps are recorded where the world sees them: a master's applied
// call on World.Wire, a call and its reply by a wrapper of the client's
// connections, the store's writes from the world's record.
func PlayModelTrace(seed uint64) ModelTrace { return playModel(seed, 1, false) }

// PlayFairModelTrace plays PlayModelTrace's schedule of seed with the fair
// policy (model/fair.pml): both clients WithFairness, two workers each, so
// that a client's waiters queue on the masters behind the other client's
// (with claims), releases hand the key to the queue's head (release.lua,
// handoff.lua, fair_undo.lua, fair_leave.lua) and a lock is passed
// in-process between the workers of one client. The handoffs are recorded
// as the world sees them: each script's call and reply, the master's lock
// key after it, and the handoff message (PUBLISH) a waiter hears.
func PlayFairModelTrace(seed uint64) ModelTrace { return playModel(seed, 2, true) }

// playModel plays a model-trace schedule with workers Lock callers per
// client, WithFairness when fair.
func playModel(seed uint64, workers int, fair bool) ModelTrace {
	rng := rand.New(rand.NewPCG(seed, 0x6d6f64656c))
	s := Schedule{Config: Config{Masters: modelMasters, Clients: modelClients, Cycles: modelCycles, Resources: 1, TTL: modelTTL}, Seed: seed}
	for range rng.IntN(4) {
		s.Faults = append(s.Faults, drawModelFault(rng))
	}
	w := NewWorld(modelMasters)
	// The masters have been up for a TTL when the schedule starts: the
	// restart guard holds out the vote of a master up for less.
	time.Sleep(modelTTL)
	r := &run{s: s, w: w, start: time.Now(), pauses: make(map[int][]fault), won: make(map[string]bool), held: make(map[string]int)}
	r.w.Seed = seed
	r.w.Latency = time.Duration(rng.IntN(3000)) * time.Microsecond
	mt := &modelRec{r: r, calls: make(map[callKey][]pending), fenceOf: make(map[uint64]int),
		wtokens: make(map[int][]string), waiterOf: make(map[int]string), claimOf: make(map[string]string), wonBy: make(map[string]int),
		unlockAt: make(map[string][2]time.Duration), passed: make(map[string]bool)}
	out := ModelTrace{TTL: modelTTL, DriftFactor: modelDriftFactor, DriftConstant: modelDriftConstant, Wire: 2 * maxJitter, GuardLag: restartEvery + nodeTimeout}
	if fair {
		// An entry's deadline is the master's clock in ms: fast by up to
		// 1% (the clockFast fault), and cut to the ms.
		out.EntryTTL, out.EntryDrift = fairEntryTTL, fairEntryTTL/100+2*time.Millisecond
	}
	for _, f := range s.Faults {
		out.Faults = append(out.Faults, f.String())
		switch f.kind {
		case clientPause:
			out.Pauses = true
			r.pauses[f.client] = append(r.pauses[f.client], f)
		case clientSuspend:
			r.pauses[f.client] = append(r.pauses[f.client], f)
		}
	}
	r.w.Wire = mt.applied

	clients := make([]*redlock.Client, modelClients)
	for i := range clients {
		r.clocks = append(r.clocks, &clientClock{})
		counter, err := fence.NewRedisCounter(&recConn{full: r.w.CounterLink(i).(full), rec: mt, client: i, master: counterNode})
		if err != nil {
			mt.fail("fence counter: %v", err)
			return mt.abort(out, clients)
		}
		src := &lockedRand{r: rand.New(rand.NewPCG(seed, uint64(3000+i)))}
		links := r.w.Links(i)
		conns := make([]driver.Conn, len(links))
		for m, l := range links {
			conns[m] = &recConn{full: l.(full), rec: mt, client: i, master: m}
		}
		opts := []redlock.Option{redlock.WithFence(counter), redlock.WithDrift(modelDriftFactor, modelDriftConstant),
			redlock.WithRetry(0, 20*time.Millisecond, 10*time.Millisecond), redlock.WithRestartGuard(restartEvery), seam.ClientOption(r.clocks[i], src).(redlock.Option)}
		if fair {
			opts = append(opts, redlock.WithFairness(fairEntryTTL))
		}
		c, err := redlock.New(conns, opts...)
		if err != nil {
			mt.fail("client %d: %v", i, err)
			return mt.abort(out, clients)
		}
		clients[i] = c
	}

	var wg sync.WaitGroup
	wg.Go(func() { mt.faults() })
	for i, c := range clients {
		for j := range workers {
			wg.Go(func() {
				r.stagger(i)
				mt.worker(c, i, i*workers+j, rand.New(rand.NewPCG(seed, uint64(100+i+1000*j))))
			})
		}
	}
	wg.Wait()
	r.later.Wait()
	for _, c := range clients {
		_ = c.Close()
	}
	time.Sleep(modelTTL + 2*nodeTimeout) // background releases end (see Run)
	r.w.Close()

	// The store's writes, in the order it applied them.
	mt.mu.Lock()
	for _, w := range r.w.writes {
		mt.steps = append(mt.steps, ModelStep{Kind: "write", At: w.at.Sub(r.start), Client: mt.fenceOf[w.fence], Fence: w.fence, Ok: w.admitted})
	}
	steps := slices.Clone(mt.steps)
	out.Errors = slices.Clone(mt.errors)
	mt.mu.Unlock()
	slices.SortStableFunc(steps, func(a, b ModelStep) int { return int(a.At - b.At) })
	out.Steps = steps
	return out
}

// abort ends a schedule that could not start: the clients made so far and
// the world's servers stop, so that the bubble can end.
func (mt *modelRec) abort(out ModelTrace, clients []*redlock.Client) ModelTrace {
	for _, c := range clients {
		if c != nil {
			_ = c.Close()
		}
	}
	mt.r.w.Close()
	mt.mu.Lock()
	defer mt.mu.Unlock()
	out.Errors = slices.Clone(mt.errors)
	return out
}

// drawModelFault draws one fault of the model's kinds within the first 3 s.
func drawModelFault(rng *rand.Rand) fault {
	f := fault{at: time.Duration(rng.IntN(3000)) * time.Millisecond, client: rng.IntN(modelClients), master: rng.IntN(modelMasters),
		lasts: time.Duration(20+rng.IntN(1500)) * time.Millisecond}
	switch rng.IntN(9) {
	case 0:
		f.kind = lostReply
	case 1:
		f.kind = lostAsk
	case 2:
		f.kind, f.delay = delayed, time.Duration(10+rng.IntN(150))*time.Millisecond
	case 3:
		f.kind = paused
	case 4:
		f.kind, f.lasts = restarted, 0
	case 5:
		f.kind, f.rate = clockFast, 1+0.01*rng.Float64()
	case 6:
		f.kind, f.lasts = counterLost, 0
	case 7:
		f.kind = clientPause
	case 8:
		f.kind = clientSuspend
	}
	return f
}

// modelRec records the steps of one model-trace schedule.
type modelRec struct {
	r       *run
	mu      sync.Mutex
	steps   []ModelStep
	calls   map[callKey][]pending // sent, not yet applied
	tokens  [modelClients][]string
	fenceOf map[uint64]int // the client a fence was handed to
	errors  []string

	wtokens  map[int][]string            // by worker: the tokens its calls sent
	waiterOf map[int]string              // by worker: its current Lock call's entry id on the masters
	claimOf  map[string]string           // a fair attempt's token: its waiter's id
	wonBy    map[string]int              // a won lock's token: the worker that holds it
	unlockAt map[string][2]time.Duration // a token's latest Unlock: when, on the world's and the client's clock
	passed   map[string]bool             // tokens passed on in-process (no release of the holder's own)
	lastKey  [modelMasters]string        // each master's lock key after the latest recorded call
}

// workerKey is the context key of the worker a call is made for.
type workerKey struct{}

// workerOf is the worker a call's context names, or -1.
func workerOf(ctx context.Context) int {
	if w, ok := ctx.Value(workerKey{}).(int); ok {
		return w
	}
	return -1
}

type callKey struct {
	client, master int
	msg            uint64
}

type pending struct {
	kind, token string
	waiter      string   // fairset, undo: the entry's id; handoff: the waiter it hands to
	stamp       uint64   // fairset, undo
	claim       bool     // fairset
	next        string   // handoff: the waiter's new token
	entries     []string // handoff, leave: the ids of the entries that leave
}

func (mt *modelRec) fail(format string, args ...any) {
	mt.mu.Lock()
	defer mt.mu.Unlock()
	mt.errors = append(mt.errors, fmt.Sprintf(format, args...))
}

// now is the world's time and client's monotonic clock, from the start.
func (mt *modelRec) now(client int) (at, mono time.Duration) {
	m, _ := mt.r.clocks[client].Now()
	return time.Since(mt.r.start), m.Sub(mt.r.start)
}

func (mt *modelRec) add(s ModelStep) {
	mt.mu.Lock()
	defer mt.mu.Unlock()
	mt.steps = append(mt.steps, s)
}

// applied hears of every call a master or the counter applied (World.Wire:
// the client, the master, the call's hash, what it was, its reply, its
// error).
func (mt *modelRec) applied(_ string, args ...any) {
	if len(args) != 6 {
		mt.fail("World.Wire gave %d arguments, not the 6 this recorder reads", len(args))
		return
	}
	client, ok1 := args[0].(int)
	master, ok2 := args[1].(int)
	msg, ok3 := args[2].(uint64)
	if !ok1 || !ok2 || !ok3 {
		mt.fail("World.Wire gave %T, %T, %T: not the client, the master and the call's hash", args[0], args[1], args[2])
		return
	}
	v := args[4]
	if err, _ := args[5].(error); err != nil {
		return
	}
	mt.mu.Lock()
	defer mt.mu.Unlock()
	k := callKey{client, master, msg}
	ps := mt.calls[k]
	if len(ps) == 0 {
		return // a call the model has no step for (a read, a probe)
	}
	p := ps[0]
	mt.calls[k] = ps[1:]
	at := time.Since(mt.r.start)
	s := ModelStep{Kind: p.kind, At: at, Client: client, Master: master, Token: p.token}
	if master < 0 {
		s.Fence, _ = mintValue(v)
		s.Clock = uint64(time.Now().UnixMicro()) // the node's clock: the counter's runs true
		mt.steps = append(mt.steps, s)
		return
	}
	// The master's lock key after the call: read on the master's own
	// goroutine, before any other call of its runs.
	after, _ := mt.r.w.Masters[master].Get(modelKey)
	before := mt.lastKey[master]
	mt.lastKey[master] = after
	// gone is a release's outcome: the key deleted, or handed on.
	gone := func(from string) ModelStep {
		if after == "" {
			return ModelStep{Kind: "release", At: at, Client: client, Master: master, Token: from, Ok: true}
		}
		return ModelStep{Kind: "hand", At: at, Client: client, Master: master, From: from, Waiter: mt.claimOf[after], Token: after}
	}
	leave := func(ids []string) {
		for _, id := range ids {
			mt.steps = append(mt.steps, ModelStep{Kind: "leave", At: at, Master: master, Waiter: id})
		}
	}
	n, _ := v.(int64)
	switch p.kind {
	case "set":
		s.Ok = v == true || v == int64(1)
	case "fairset":
		s.Kind, s.Waiter, s.Stamp, s.Claim = "set", p.waiter, p.stamp, p.claim
		if vs, _ := v.([]any); len(vs) > 0 {
			s.Ok = vs[0] == int64(1)
		}
		if !s.Ok && after != before && before != "" && mt.claimOf[before] == p.waiter {
			// The key held an earlier attempt's token of this waiter, and
			// a waiter queued ahead: fair_lock.lua handed it on first.
			mt.steps = append(mt.steps, gone(before))
		}
	case "extend":
		s.Ok = n == 1
	case "release":
		if n == 1 {
			s = gone(p.token)
		}
	case "undo":
		if n == 1 {
			mt.steps = append(mt.steps, ModelStep{Kind: "queue", At: at, Client: client, Master: master, Waiter: p.waiter, Stamp: p.stamp})
			s = gone(p.token)
		} else {
			s.Kind = "release"
		}
	case "handoff":
		leave(p.entries)
		switch n {
		case 2, 3:
			s = ModelStep{Kind: "hand", At: at, Client: client, Master: master, From: p.token, Waiter: p.waiter, Token: p.next, Ok: true}
			if n == 3 {
				s.From = "" // the key was free for the head
			}
		case 1:
			s = gone(p.token)
		default:
			s.Kind = "release"
		}
	case "leave":
		leave(p.entries)
		if after == before {
			return
		}
		if after == "" {
			s = ModelStep{Kind: "release", At: at, Client: client, Master: master, Token: before, Ok: true}
		} else {
			s = gone(before)
		}
	}
	mt.steps = append(mt.steps, s)
}

// modelKey is the lock key of the schedules' one resource.
const modelKey = "lock:job"

// mintValue is the fence in mint.lua's reply.
func mintValue(v any) (uint64, bool) {
	switch v := v.(type) {
	case string:
		n, err := strconv.ParseUint(v, 10, 64)
		return n, err == nil
	case int64:
		return uint64(v), v > 0
	}
	return 0, false
}

// recConn records a client's calls to a master or the counter, and their
// replies.
type recConn struct {
	full
	rec            *modelRec
	client, master int
}

func (c *recConn) sent(p pending, msg uint64) {
	c.rec.mu.Lock()
	defer c.rec.mu.Unlock()
	k := callKey{c.client, c.master, msg}
	c.rec.calls[k] = append(c.rec.calls[k], p)
}

// Subscribe records the handoffs a client hears of: a release that handed
// the key to the claim of one of its waiters publishes
// '<from>/<head>/<token>' on the waiter's channel (queue.lua's
// hand_to_head), and the waiter counts that master's vote for token.
func (c *recConn) Subscribe(ctx context.Context) driver.Subscription {
	return &recSub{Subscription: c.full.Subscribe(ctx), c: c}
}

type recSub struct {
	driver.Subscription
	c *recConn
}

func (s *recSub) Receive(ctx context.Context) (driver.Push, error) {
	p, err := s.Subscription.Receive(ctx)
	if err == nil && !p.Pong && strings.HasPrefix(p.Channel, "lockp:") {
		if parts := strings.Split(p.Payload, "/"); len(parts) == 3 {
			at, _ := s.c.rec.now(s.c.client)
			s.c.rec.add(ModelStep{Kind: "setreply", At: at, Client: s.c.client, Master: s.c.master, Token: parts[2], Ok: true})
		}
	}
	return p, err
}

func (c *recConn) SetNX(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	if !strings.HasPrefix(key, "lock:") {
		return c.full.SetNX(ctx, key, value, ttl)
	}
	return c.setNX(ctx, pending{kind: "set", token: value}, msgHash("set", []string{key}, value, ttl), func() (bool, error) { return c.full.SetNX(ctx, key, value, ttl) })
}

// round records the start of token's round with its first call, and
// the token as one the worker of ctx sent.
func (c *recConn) round(ctx context.Context, token string) {
	mt := c.rec
	mt.mu.Lock()
	first := !slices.Contains(mt.tokens[c.client], token)
	if first {
		mt.tokens[c.client] = append(mt.tokens[c.client], token)
		if w := workerOf(ctx); w >= 0 {
			mt.wtokens[w] = append(mt.wtokens[w], token)
		}
	}
	mt.mu.Unlock()
	if first {
		// The round's calls go out at the instant it reads its clock.
		at, mono := mt.now(c.client)
		mt.add(ModelStep{Kind: "round", At: at, Mono: mono, Client: c.client, Token: token})
	}
}

// setNX records a SET NX of token (plain SET NX, the probe script's, or
// a fair attempt's), and the start of its round with its first call.
func (c *recConn) setNX(ctx context.Context, p pending, msg uint64, call func() (bool, error)) (bool, error) {
	mt := c.rec
	token := p.token
	c.round(ctx, token)
	c.sent(p, msg)
	ok, err := call()
	if err == nil {
		at, _ := mt.now(c.client)
		mt.add(ModelStep{Kind: "setreply", At: at, Client: c.client, Master: c.master, Token: token, Ok: ok})
	}
	return ok, err
}

func (c *recConn) Eval(ctx context.Context, s *driver.Script, keys []string, args ...any) (any, error) {
	src := s.Source()
	kind := ""
	switch {
	case strings.Contains(src, "One fair attempt of a queued waiter"):
		kind = "fairset" // fair_lock.lua
	case strings.Contains(src, handoffMark):
		kind = "handoff"
	case strings.Contains(src, "The undo of a fair waiter's lost attempt"):
		kind = "undo"
	case strings.Contains(src, "A queued waiter leaves"):
		kind = "leave"
	case strings.Contains(src, "The release of a lock"):
		kind = "release"
	case strings.Contains(src, "Compare-and-pexpire"):
		kind = "extend"
	case strings.Contains(src, "redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])"):
		kind = "set" // the plain waiter's probe (probe.lua): SET NX, and who holds the key
	case c.master == counterNode && (strings.Contains(src, "Mint a fencing token") || src == "return redis.call('INCR', KEYS[1])"):
		kind = "mint"
	}
	if kind == "" {
		return c.full.Eval(ctx, s, keys, args...)
	}
	token := ""
	if len(args) > 0 {
		token, _ = args[0].(string)
	}
	msg := msgHash(s.Hash(), keys, args...)
	p := pending{kind: kind, token: token}
	str := func(i int) string {
		if i < len(args) {
			return fmt.Sprint(args[i])
		}
		return ""
	}
	ids := func(from int) []string {
		var out []string
		for i := from; i < len(args); i++ {
			if f := strings.Fields(str(i)); len(f) > 0 {
				out = append(out, f[0])
			}
		}
		return out
	}
	switch kind {
	case "set", "fairset":
		if kind == "fairset" {
			// ARGV: token, TTL, id, stamp, entry TTL, tag, prefix, claim.
			p.waiter, p.claim = str(2), str(7) == "1"
			p.stamp, _ = strconv.ParseUint(str(3), 10, 64)
			c.rec.mu.Lock()
			c.rec.claimOf[token] = p.waiter
			if w := workerOf(ctx); w >= 0 {
				c.rec.waiterOf[w] = p.waiter
			}
			c.rec.mu.Unlock()
		}
		var v any
		_, err := c.setNX(ctx, p, msg, func() (bool, error) {
			var err error
			v, err = c.full.Eval(ctx, s, keys, args...)
			if vs, ok := v.([]any); ok && len(vs) > 0 {
				return vs[0] == int64(1), err
			}
			return v == int64(1), err
		})
		return v, err
	case "handoff":
		// ARGV: token, the waiter, its new token, TTL, entries that leave.
		p.waiter, p.next, p.entries = str(1), str(2), ids(4)
		if p.waiter != "" {
			c.rec.mu.Lock()
			c.rec.claimOf[p.next] = p.waiter
			c.rec.mu.Unlock()
			c.round(ctx, p.next) // the handoff's round, for the waiter's new token
		}
	case "undo":
		// ARGV: token, id, stamp, entry TTL.
		p.waiter = str(1)
		p.stamp, _ = strconv.ParseUint(str(2), 10, 64)
	case "leave":
		p.entries = ids(0)
	}
	c.sent(p, msg)
	v, err := c.full.Eval(ctx, s, keys, args...)
	if err != nil {
		return v, err
	}
	at, _ := c.rec.now(c.client)
	switch kind {
	case "handoff":
		if v == int64(2) || v == int64(3) {
			c.rec.add(ModelStep{Kind: "setreply", At: at, Client: c.client, Master: c.master, Token: p.next, Ok: true})
		}
	case "extend":
		c.rec.add(ModelStep{Kind: "extreply", At: at, Client: c.client, Master: c.master, Token: token, Ok: v == int64(1)})
	case "mint":
		if n, ok := mintValue(v); ok {
			c.rec.add(ModelStep{Kind: "mintreply", At: at, Client: c.client, Fence: n})
		}
	}
	return v, err
}

// faults applies the schedule's faults of the world at their times; a
// restart and a lost counter key are steps of the model.
func (mt *modelRec) faults() {
	r := mt.r
	fs := slices.Clone(r.s.Faults)
	slices.SortStableFunc(fs, func(a, b fault) int { return int(a.at - b.at) })
	var ends sync.WaitGroup
	for _, f := range fs {
		if f.kind == clientPause || f.kind == clientSuspend {
			continue // the worker takes them
		}
		if d := f.at - time.Since(r.start); d > 0 {
			time.Sleep(d)
		}
		heal := r.apply(f)
		switch f.kind {
		case restarted:
			mt.mu.Lock()
			mt.lastKey[f.master] = ""
			mt.steps = append(mt.steps, ModelStep{Kind: "restart", At: time.Since(r.start), Master: f.master})
			mt.mu.Unlock()
		case counterLost:
			mt.add(ModelStep{Kind: "lost", At: time.Since(r.start)})
		}
		if heal != nil {
			ends.Go(func() {
				time.Sleep(f.lasts)
				heal()
			})
		}
	}
	ends.Wait()
}

// released records, once the undo of tokens had undoBound to land, that
// their releases are done: when every master answered client from since
// on (a master cut off keeps a key until it answers or the key's TTL ends,
// which the model's release retries do not cover).
func (mt *modelRec) released(client int, tokens []string, since time.Time) {
	r := mt.r
	r.later.Go(func() {
		time.Sleep(undoBound)
		for i := range modelMasters {
			if !r.reachable(client, i, since, time.Now()) {
				return
			}
		}
		at, _ := mt.now(client)
		mt.mu.Lock()
		defer mt.mu.Unlock()
		for _, t := range tokens {
			if !mt.passed[t] { // a lock passed on in-process is released by its last holder
				mt.steps = append(mt.steps, ModelStep{Kind: "released", At: at, Client: client, Token: t})
			}
		}
	})
}

// tokensSince returns the tokens worker sent from the n-th on.
func (mt *modelRec) tokensSince(worker, n int) []string {
	mt.mu.Lock()
	defer mt.mu.Unlock()
	return slices.Clone(mt.wtokens[worker][n:])
}

// unlock records that the holder of l ends its work, and unlocks.
func (mt *modelRec) unlock(ctx context.Context, client int, l *redlock.Lock) {
	at, mono := mt.now(client)
	mt.mu.Lock()
	mt.steps = append(mt.steps, ModelStep{Kind: "unlock", At: at, Mono: mono, Client: client, Token: l.Token()})
	mt.unlockAt[l.Token()] = [2]time.Duration{at, mono}
	mt.mu.Unlock()
	_ = l.Unlock(ctx)
}

// worker is redlock.pml's Client on the real client: its lock cycles. A
// client's workers (fair.pml's X1 and X2) may pass a lock in-process.
func (mt *modelRec) worker(c *redlock.Client, client, worker int, rng *rand.Rand) {
	r := mt.r
	wctx := context.WithValue(context.Background(), workerKey{}, worker)
	for range modelCycles {
		r.nap(client, time.Duration(1+rng.IntN(400))*time.Millisecond)
		mt.mu.Lock()
		sent := len(mt.wtokens[worker])
		mt.waiterOf[worker] = ""
		mt.mu.Unlock()
		began := time.Now()
		ctx, cancel := context.WithTimeout(wctx, 3*modelTTL)
		var l *redlock.Lock
		var err error
		if rng.IntN(2) == 0 {
			l, err = c.TryLock(ctx, "job", modelTTL)
		} else {
			l, err = c.Lock(ctx, "job", modelTTL)
		}
		tokens := mt.tokensSince(worker, sent)
		if err != nil {
			cancel()
			mt.released(client, tokens, began)
			continue
		}
		at, mono := mt.now(client)
		fences, _ := l.Fences()
		if len(fences) != 1 {
			mt.fail("c%d: a lock WithFence on one resource came with fences %v", client, fences)
			_ = l.Unlock(wctx)
			cancel()
			continue
		}
		mt.mu.Lock()
		mt.fenceOf[fences[0]] = client
		if from, ok := mt.wonBy[l.Token()]; ok && from != worker {
			// A lock another worker of this client held: passed in-process
			// at its Unlock (fair.Policy.passOn).
			u := mt.unlockAt[l.Token()]
			mt.steps = append(mt.steps, ModelStep{Kind: "pass", At: u[0], Mono: u[1], Client: client, Token: l.Token(), Waiter: mt.waiterOf[worker]})
			mt.passed[l.Token()] = true
		}
		mt.wonBy[l.Token()] = worker
		mt.mu.Unlock()
		mt.add(ModelStep{Kind: "won", At: at, Mono: mono, Client: client, Token: l.Token(), Until: l.Until().Sub(r.start), Fence: fences[0]})
		if lost := slices.DeleteFunc(tokens, func(t string) bool { return t == l.Token() }); len(lost) > 0 {
			mt.released(client, lost, began)
		}
		r.nap(client, time.Duration(rng.Int64N(int64(modelTTL))))
		if rng.IntN(3) == 0 {
			if rng.IntN(2) == 0 {
				// At the last moment (as Run's holders do): the Extend's
				// round may end after the lease it extends, and must fail.
				eps := time.Duration(1+rng.IntN(60)) * time.Microsecond
				if d := time.Until(r.clocks[client].world(l.Until())) - eps; d > 0 {
					r.nap(client, d)
				}
			}
			at, mono := mt.now(client)
			mt.add(ModelStep{Kind: "extround", At: at, Mono: mono, Client: client, Token: l.Token()})
			if err := l.Extend(ctx, modelTTL); err != nil {
				// A failed Extend ends the lock.
				at, _ := mt.now(client)
				mt.add(ModelStep{Kind: "ended", At: at, Client: client, Token: l.Token()})
				cancel()
				// Unlock, as a caller's deferred Unlock does: an Extend
				// refused because the lease had run out releases nothing
				// itself (Lock.lose), and a fair Unlock of a lock that ended
				// releases it, never passes it on (fair.Policy.Unlock).
				mt.unlock(wctx, client, l)
				mt.released(client, []string{l.Token()}, began)
				continue
			}
			at, mono = mt.now(client)
			mt.add(ModelStep{Kind: "extended", At: at, Mono: mono, Client: client, Token: l.Token(), Until: l.Until().Sub(r.start)})
			r.nap(client, time.Duration(rng.Int64N(int64(modelTTL/2))))
		}
		// A suspend of the machine before the look (redlock.pml's SUSPEND).
		if f, ok := mt.take(client, clientSuspend); ok {
			mt.freeze(client, f, true)
		}
		if l.Context().Err() != nil {
			cancel()
			mt.unlock(wctx, client, l)
			mt.released(client, []string{l.Token()}, began)
			continue
		}
		at, mono = mt.now(client)
		mt.add(ModelStep{Kind: "enter", At: at, Mono: mono, Client: client, Token: l.Token()})
		// A pause between the look and the write (redlock.pml's PAUSE).
		if f, ok := mt.take(client, clientPause); ok {
			mt.freeze(client, f, false)
		}
		wctx, wcancel := context.WithTimeout(context.Background(), time.Second)
		guard := fence.RedisGuard{Compare: fence.Newer}
		werr := r.w.guarded(wctx, client, "data:job", fences[0], func(ctx context.Context, store driver.Conn) error {
			return guard.Set(ctx, store, "data:job", strconv.Itoa(client), fences[0], 0)
		})
		wcancel()
		if werr != nil && !errors.Is(werr, fence.ErrFenceRejected) {
			mt.fail("c%d: the store failed a write: %v", client, werr)
		}
		mt.unlock(wctx, client, l)
		cancel()
		mt.released(client, []string{l.Token()}, began)
	}
}

// take returns a fault of kind of client's that has begun, if any.
func (mt *modelRec) take(client int, k kind) (fault, bool) {
	r := mt.r
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, f := range r.pauses[client] {
		if f.kind == k && f.at <= time.Since(r.start) {
			r.pauses[client] = slices.Delete(r.pauses[client], i, i+1)
			return f, true
		}
	}
	return fault{}, false
}

// freeze stops client's process for f.lasts (suspend: its machine, which
// its monotonic clock misses).
func (mt *modelRec) freeze(client int, f fault, suspend bool) {
	r := mt.r
	r.mu.Lock()
	r.frozen = append(r.frozen, span{client: client, from: time.Now(), to: time.Now().Add(f.lasts)})
	r.mu.Unlock()
	r.w.Freeze(client)
	if suspend {
		r.clocks[client].suspend()
	}
	time.Sleep(f.lasts)
	if suspend {
		r.clocks[client].resume()
	}
	r.w.Thaw(client)
}
