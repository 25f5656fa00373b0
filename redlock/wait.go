package redlock

import (
	"context"
	_ "embed"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"quorumlock.dev/driver"

	"quorumlock.dev/internal/quorum"
)

// How a Lock call waits after an attempt lost to another holder: it reads
// who holds the key and for how long on the masters that refused, and
// sleeps until a majority of keys will have expired, or until the holder's
// release is published (scripts/release.lua) on a channel named like the
// key, whichever comes first. A Client keeps one subscription connection per
// master, opened when some Lock first waits, shared by every resource it
// waits on; docs/design.md ("Waiting for a held lock") says why it is built
// this way.

var (
	//go:embed scripts/holder.lua
	holderLua    string
	holderScript = driver.NewScript(holderLua)
)

// wakeJitter spreads the waiters that wake at one expiry, so that they do
// not all send their SETs at the same instant.
const wakeJitter = time.Millisecond

// pusher is a Client's subscriptions, one per master that can subscribe,
// made at the first wait. The zero value is ready to use.
type pusher struct {
	mu     sync.Mutex
	subs   []*subscriber // by master; nil: cannot subscribe; the slice is nil until the first wait
	closed bool
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// subscriber is the subscription connection to one master, run by two
// goroutines: write sends SUBSCRIBE, UNSUBSCRIBE and PING as waiters come
// and go, read receives releases, pongs and errors. A waiter never calls
// the connection itself, so a master that hangs holds these two goroutines
// and nothing else.
type subscriber struct {
	ps   driver.Subscription
	kick chan struct{} // cap 1: something for write to do
	done chan struct{}

	mu       sync.Mutex
	chans    map[string]*channel
	seq      uint64 // the last batch that write sent
	acked    uint64 // the last batch whose PING came back
	up       bool   // a pong came back since the connection last failed
	needPing bool
}

// channel is one resource that waiters of this client wait on.
type channel struct {
	waiters map[*waiter]struct{}
	batch   uint64 // the batch whose SUBSCRIBE covers it; 0: not sent yet
}

// waiter is one Lock call that waits.
type waiter struct {
	channel string
	subs    []*subscriber // the masters it subscribed on
	wake    chan struct{} // cap 1: a release, or a lost connection
	ready   chan struct{} // cap 1: a subscription was confirmed

	mu     sync.Mutex
	holder string // wake only on this token's release; "": on any
	id     string // queued (fair): wake only on a handoff to this id
	got    int    // queued: releases worth waking for since the last attempt
	need   int    // queued: how many releases make a majority free; 0: any one
}

// join registers a waiter for key's channel on every master that can
// subscribe, starting the subscriptions at the first call. After Close it
// subscribes nowhere: the waiter then has the timer alone.
func (c *Client) join(key string) *waiter {
	w := &waiter{channel: key, wake: make(chan struct{}, 1), ready: make(chan struct{}, 1)}
	p := &c.push
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return w
	}
	if p.subs == nil {
		c.startSubscribers()
	}
	for _, s := range p.subs {
		if s != nil {
			w.subs = append(w.subs, s)
		}
	}
	p.mu.Unlock()
	for _, s := range w.subs {
		s.add(w)
	}
	return w
}

// startSubscribers makes the subscriber of every master that can
// subscribe; c.push.mu is held.
func (c *Client) startSubscribers() {
	p := &c.push
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	p.subs = make([]*subscriber, len(c.masters))
	for i, m := range c.masters {
		sm, ok := m.(driver.Subscriber) // others are waited on by the timer alone
		if !ok {
			continue
		}
		s := &subscriber{
			ps:    sm.Subscribe(ctx), // no channels yet: no I/O
			kick:  make(chan struct{}, 1),
			done:  make(chan struct{}),
			chans: make(map[string]*channel),
		}
		p.subs[i] = s
		p.wg.Go(func() { s.write(ctx, c, i) })
		p.wg.Go(func() { s.read(ctx, c, i) })
	}
}

// Close stops the client's subscriptions and watcher and wakes its waiting Lock
// calls, which poll at the retry delay from then on; the client still locks,
// counting every master's vote. It returns nil once those goroutines ended, or
// after one node timeout (a call stuck on a hung master ends in the background;
// docs/design.md, "Waiting for a held lock"). Idempotent; it releases no lock.
func (c *Client) Close() error {
	by := time.Now().Add(c.cfg.nodeTimeout)
	c.watcher.Close(by)
	p := &c.push
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	subs, cancel := p.subs, p.cancel
	p.mu.Unlock()
	if cancel != nil {
		cancel() // ends a dial in progress
	}
	for _, s := range subs {
		if s == nil {
			continue
		}
		close(s.done)
		s.lost() // wakes every waiter: it polls from now on
		// Unblocks read; the error is only ErrClosed or the socket's. Not
		// waited for: it waits for a subscription call in flight, which a
		// master that hangs holds until the ReadTimeout.
		go func() { _ = s.ps.Close() }()
	}
	waitBy(&p.wg, by)
	return nil
}

// waitBy waits for wg, at most until by.
func waitBy(wg *sync.WaitGroup, by time.Time) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(time.Until(by))
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (s *subscriber) add(w *waiter) {
	s.mu.Lock()
	ch := s.chans[w.channel]
	if ch == nil {
		ch = &channel{waiters: make(map[*waiter]struct{})}
		s.chans[w.channel] = ch
	}
	ch.waiters[w] = struct{}{}
	fresh := ch.batch == 0
	s.mu.Unlock()
	if fresh {
		signal(s.kick)
	}
}

// remove unregisters w; the last waiter of a channel has write unsubscribe
// it, so the master stops sending this client releases nobody waits for.
func (s *subscriber) remove(w *waiter) {
	s.mu.Lock()
	ch := s.chans[w.channel]
	delete(ch.waiters, w)
	last := len(ch.waiters) == 0
	s.mu.Unlock()
	if last {
		signal(s.kick)
	}
}

// confirmed reports whether a release of channel on this master now
// reaches us: its SUBSCRIBE was followed by a PING that came back on the
// connection that is up. go-redis resubscribes every channel when it
// redials, before anything else is sent, so a pong after a redial covers
// them all.
func (s *subscriber) confirmed(channel string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.chans[channel]
	return s.up && ch != nil && ch.batch != 0 && s.acked >= ch.batch
}

// backoff is the pause after the n-th failure in a row of a subscription
// connection: 10 ms doubling to 1 s.
func backoff(n int) time.Duration {
	return min(10*time.Millisecond<<min(n, 7), time.Second)
}

// pause sleeps d unless the subscriber is stopped first; false if stopped.
func (s *subscriber) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.done:
		return false
	}
}

func (s *subscriber) write(ctx context.Context, c *Client, i int) {
	failures := 0
	for {
		select {
		case <-s.done:
			return
		case <-s.kick:
		}
		var sub, unsub []string
		s.mu.Lock()
		for name, ch := range s.chans {
			switch {
			case len(ch.waiters) == 0:
				unsub = append(unsub, name)
				delete(s.chans, name)
			case ch.batch == 0:
				sub = append(sub, name)
			}
		}
		ping := s.needPing || len(sub) > 0
		s.needPing = false
		s.seq++
		seq := s.seq
		for _, name := range sub {
			s.chans[name].batch = seq
		}
		s.mu.Unlock()

		// Redis runs a connection's commands in order, so the PING's reply
		// says that every command before it has taken effect.
		var err error
		if len(unsub) > 0 {
			err = s.ps.Unsubscribe(ctx, unsub...)
		}
		if err == nil && len(sub) > 0 {
			err = s.ps.Subscribe(ctx, sub...)
		}
		if err == nil && ping {
			err = s.ps.Ping(ctx, strconv.FormatUint(seq, 10))
		}
		if err == nil {
			failures = 0
			continue
		}
		c.cfg.logger.Debug("redlock: subscription write failed; waiters fall back to their timers", "master", c.addrs[i], "err", err)
		s.mu.Lock()
		s.needPing = true
		s.mu.Unlock()
		if !s.pause(backoff(failures)) {
			return
		}
		failures++
		signal(s.kick)
	}
}

func (s *subscriber) read(ctx context.Context, c *Client, i int) {
	failures := 0
	for {
		// Close closes the connection, which ends the read.
		msg, err := s.ps.Receive(ctx)
		select {
		case <-s.done:
			return
		default:
		}
		if err != nil {
			c.cfg.logger.Debug("redlock: subscription lost; waiters retry at once", "master", c.addrs[i], "err", err)
			s.lost()
			signal(s.kick)
			if !s.pause(backoff(failures)) {
				return
			}
			failures++
			continue
		}
		failures = 0
		if msg.Pong {
			s.pong(msg.Payload)
		} else {
			s.deliver(msg.Channel, msg.Payload)
		}
	}
}

// lost marks the connection down and wakes every waiter: a release may
// have been published while it was.
func (s *subscriber) lost() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.up, s.needPing = false, true
	for _, ch := range s.chans {
		for w := range ch.waiters {
			signal(w.wake)
		}
	}
}

func (s *subscriber) pong(payload string) {
	seq, err := strconv.ParseUint(payload, 10, 64)
	if err != nil {
		return // not our PING
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acked = max(s.acked, seq)
	s.up = true
	for _, ch := range s.chans {
		for w := range ch.waiters {
			signal(w.ready)
		}
	}
}

func (s *subscriber) deliver(channel, token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.chans[channel]
	if ch == nil {
		return
	}
	for w := range ch.waiters {
		if w.wants(token) {
			signal(w.wake)
		}
	}
}

// wants reports whether a release message (the released token, and
// "/head" when the key was handed to a queue's head) is worth waking for.
func (w *waiter) wants(msg string) bool {
	token, head, handoff := strings.Cut(msg, "/")
	w.mu.Lock()
	defer w.mu.Unlock()
	wanted := w.holder == "" || w.holder == token
	if handoff && w.id != "" {
		wanted = head == w.id
	}
	if !wanted || w.need == 0 {
		return wanted
	}
	w.got++
	return w.got >= w.need
}

// expect has a queued waiter wake only once need releases came since its
// last attempt: waking at the first of a release's messages, it would try
// before the others' masters had handed the key over, and lose.
func (w *waiter) expect(need int) {
	w.mu.Lock()
	w.need = max(need, 0)
	if need <= 0 {
		w.got = 0
	}
	ready := w.need > 0 && w.got >= w.need
	w.mu.Unlock()
	if ready {
		signal(w.wake)
	}
}

func (w *waiter) setID(id string) {
	w.mu.Lock()
	w.id = id
	w.mu.Unlock()
}

func (w *waiter) setHolder(token string) {
	w.mu.Lock()
	w.holder = token
	w.mu.Unlock()
}

func (w *waiter) leave() {
	for _, s := range w.subs {
		s.remove(w)
	}
}

// listening waits, at most timeout, until a release on quorum masters
// reaches w, and reports whether it does.
func (w *waiter) listening(ctx context.Context, quorum int, timeout time.Duration) bool {
	open := 0
	for _, s := range w.subs {
		select {
		case <-s.done: // closed by Close
		default:
			open++
		}
	}
	if open < quorum {
		return false
	}
	var t *time.Timer
	for {
		n := 0
		for _, s := range w.subs {
			if s.confirmed(w.channel) {
				n++
			}
		}
		if n >= quorum {
			return true
		}
		if t == nil {
			t = time.NewTimer(timeout)
			defer t.Stop()
		}
		select {
		case <-w.ready:
		case <-t.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// holderReply is what the holder script said on one master.
type holderReply struct {
	ok      bool
	token   string
	pttl    int64 // ms; -2 no key, -1 no expiry
	foreign int64 // fair_lock.lua: the stamp of the first waiter of another client queued (MaxInt64: none)
}

// plan prepares w for the wait after the lost round: it returns how long
// to sleep. A message on w.wake cuts the sleep short.
func (c *Client) plan(ctx context.Context, w *waiter, round *quorum.Round, key string, poll time.Duration) time.Duration {
	// Any release until we know who holds the key wakes us; one that came
	// before this point is seen by the read below.
	select {
	case <-w.wake:
	default:
	}
	w.setHolder("")
	pushed := w.listening(ctx, c.quorum, c.cfg.nodeTimeout)
	replies := c.readHolders(ctx, round, key)
	free, known, holder := wakeAfter(round, replies, c.quorum)
	w.setHolder(holder)
	if !known {
		return poll
	}
	if free > 0 || !pushed {
		// Expiry follows the masters' clocks, not ours: a waiter that wakes
		// a little early finds the key there and reads its TTL again.
		free += rand.N(wakeJitter)
	}
	if !pushed {
		// No release reaches us: look again at the poll interval.
		return min(free, poll)
	}
	return free
}

// readHolders runs the holder script on the masters that refused round,
// each bounded by the node timeout; a master that did not answer in time
// has ok false.
func (c *Client) readHolders(ctx context.Context, round *quorum.Round, key string) []holderReply {
	n := len(c.masters)
	var mu sync.Mutex // the calls that time out write after Do returned
	replies := make([]holderReply, n)
	over := false
	keys := []string{key}
	quorum.Group{Nodes: n, Timeout: c.cfg.nodeTimeout}.Do(ctx, func(ctx context.Context, i int) (bool, error) {
		if round.Answer(i) != quorum.Refused {
			return true, nil
		}
		vals, err := call(c, ctx, i, func(ctx context.Context, m driver.Conn) ([]any, error) {
			return evalSlice(ctx, m, holderScript, keys)
		})
		if err != nil || len(vals) != 2 {
			return false, err
		}
		r := holderReply{ok: true}
		r.token, _ = vals[0].(string)
		r.pttl, r.ok = vals[1].(int64)
		mu.Lock()
		if !over {
			replies[i] = r
		}
		mu.Unlock()
		return true, nil
	})
	mu.Lock()
	over = true
	out := slices.Clone(replies)
	mu.Unlock()
	return out
}

// wakeAfter is when a majority can next be won after round was lost: the
// quorum-th smallest time until a master is free (now, for one that took
// our key or whose key is gone; its key's TTL for one that refused; never,
// for one that failed, did not answer, or keeps a key without expiry).
// known is false when no majority will ever be free by expiry alone. holder
// is the token that holds a majority, whose release is worth waking for, or
// "" when none does (partial keys of other losers: any release may help).
func wakeAfter(round *quorum.Round, replies []holderReply, need int) (free time.Duration, known bool, holder string) {
	n := round.Nodes()
	at := make([]int64, n)
	counts := make(map[string]int)
	for i := range n {
		r := replies[i]
		switch {
		case round.Answer(i) == quorum.Agreed:
			at[i] = 0
		case round.Answer(i) != quorum.Refused || !r.ok || r.pttl == -1:
			at[i] = math.MaxInt64
		case r.pttl == -2:
			at[i] = 0
		default:
			at[i] = max(r.pttl, 0)
		}
		if r.ok && r.pttl != -2 && r.token != "" {
			counts[r.token]++
		}
	}
	for tok, k := range counts {
		if k >= need {
			holder = tok
		}
	}
	slices.Sort(at)
	if at[need-1] == math.MaxInt64 {
		return 0, false, holder
	}
	return time.Duration(at[need-1]) * time.Millisecond, true, holder
}
