// Package push is what both wait policies of a Lock call wake on: it wakes
// a waiter when the holder's release is published (release.lua PUBLISHes on
// a channel named like the lock key, with the released token; a fair
// waiter also hears the handoffs named after it), and computes
// when a majority of the holder's keys expire, for the timer that backs the
// push up. It keeps one subscription connection per master that can
// subscribe ([driver.Subscriber]), opened at the first wait and shared by
// every resource waited on. It does not call the masters' keys: the caller
// reads the holders and sends the attempts.
package push

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/internal/bounded"
)

// Hub is one Client's subscriptions, one per master that can subscribe,
// made at the first [Hub.Join]. Each runs two goroutines until [Hub.Close].
type Hub struct {
	conns  []driver.Conn
	labels []string // for logs
	logger *slog.Logger

	mu     sync.Mutex
	subs   []*subscriber // by master; nil: cannot subscribe; the slice is nil until the first Join
	closed bool
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewHub returns the hub of masters conns, named labels in logs. It does no I/O.
func NewHub(conns []driver.Conn, labels []string, logger *slog.Logger) *Hub {
	return &Hub{conns: conns, labels: labels, logger: logger}
}

// subscriber is the subscription connection to one master, run by two
// goroutines: write sends SUBSCRIBE, UNSUBSCRIBE and PING as waiters come
// and go, read receives releases, pongs and errors. A waiter never calls
// the connection itself, so a master that hangs holds these two goroutines
// and nothing else.
type subscriber struct {
	i    int // the master's index
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

// channel is one lock key that waiters of this client wait on.
type channel struct {
	waiters map[*Waiter]struct{}
	batch   uint64    // the batch whose SUBSCRIBE covers it; 0: not sent yet
	idle    time.Time // when its last waiter left; zero while it has waiters
}

// linger is how long a channel stays subscribed with no waiter: a client
// that takes turns on a resource with others waits on it again within a
// section, and would otherwise send SUBSCRIBE, PING and UNSUBSCRIBE to
// every master for each wait (a third of its commands in the contended
// benchmark with a client per goroutine).
const linger = time.Second

// Waiter is one Lock call that waits on a channel.
type Waiter struct {
	channel  string
	handoffs string        // the second channel: queued, its client's handoffs on the same key (HandoffChannel; "" before SetID); else HandedChannel
	subs     []*subscriber // the masters it subscribed on
	wake     chan struct{} // cap 1: a release, or a lost connection
	ready    chan struct{} // cap 1: a subscription was confirmed

	mu     sync.Mutex
	holder string   // wake only on this token's release; "": on any
	own    string   // the token of its own attempt, whose undo is no reason to wake
	id     string   // queued (fair): wake only on a handoff to this id
	handed []string // queued: by master, the token the last handoff to id there named
	quorum int      // queued: handoffs to own that make a majority
	got    int      // queued: releases worth waking for since the last attempt
	need   int      // queued: how many releases make a majority free; 0: any one
	// Since Mark: the releases published, by master (a bounded log;
	// overflowed: more came than it keeps).
	marked     bool
	seen       []released
	overflowed bool
}

// released is a release message of master i, naming token.
type released struct {
	i     int
	token string
}

// seenCap bounds the log of Mark: a release wakes every waiter with a
// message from each master, so more than this since one attempt began is
// a busy key, read again rather than logged.
const seenCap = 8

// Join registers a waiter of a client without fairness for channel (a lock
// key) and its HandedChannel on every master that can subscribe, starting
// the subscriptions at the first call. After Close it subscribes nowhere:
// the waiter then has its timer alone.
func (h *Hub) Join(channel string) *Waiter { return h.JoinQueued(channel, HandedChannel(channel)) }

// JoinQueued is [Hub.Join] for a queued waiter, whose handoffs come on
// channel handoffs too (HandoffChannel; "": none): both are sent in one
// SUBSCRIBE.
func (h *Hub) JoinQueued(channel, handoffs string) *Waiter {
	w := &Waiter{channel: channel, handoffs: handoffs, wake: make(chan struct{}, 1), ready: make(chan struct{}, 1)}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return w
	}
	if h.subs == nil {
		h.start()
	}
	for _, s := range h.subs {
		if s != nil {
			w.subs = append(w.subs, s)
		}
	}
	h.mu.Unlock()
	for _, s := range w.subs {
		s.add(w, channel, handoffs)
	}
	return w
}

// HandedChannel is where a release that hands key to a queued waiter with
// its claim publishes the released token, as its plain release would on
// key's own channel, for the waiters of clients without fairness (only
// they subscribe to it): one that sleeps on that token wakes and reads the
// new holder. A fair attempt that takes over a key holding an earlier
// attempt's token of its waiter publishes that token there too. Without it such a waiter, in a deployment that mixes fair
// and plain clients, slept until the released key's expiry; on key's own
// channel the message would reach every fair client waiting on key too.
func HandedChannel(key string) string { return "lockw:" + key }

// HandoffChannel is where a release that hands key to a queued waiter of
// the client tagged tag publishes (scripts/queue.lua, hand_to_head): only
// that client's subscriptions receive it, not every client's that waits on
// key.
func HandoffChannel(key, tag string) string {
	return "lockp:" + tag + ":" + key
}

// start makes the subscriber of every master that can subscribe; h.mu is held.
func (h *Hub) start() {
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.subs = make([]*subscriber, len(h.conns))
	for i, m := range h.conns {
		sm, ok := m.(driver.Subscriber) // others are waited on by the timer alone
		if !ok {
			continue
		}
		s := &subscriber{
			i:     i,
			ps:    sm.Subscribe(ctx), // no channels yet: no I/O
			kick:  make(chan struct{}, 1),
			done:  make(chan struct{}),
			chans: make(map[string]*channel),
		}
		h.subs[i] = s
		h.wg.Go(func() { s.write(ctx, h, i) })
		h.wg.Go(func() { s.read(ctx, h, i) })
	}
}

// Close stops the subscriptions and wakes every waiter, which has its timer
// alone from then on. It returns once the goroutines ended, or at by (a
// call stuck on a hung master ends in the background). Idempotent.
func (h *Hub) Close(by time.Time) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	subs, cancel := h.subs, h.cancel
	h.mu.Unlock()
	if cancel != nil {
		cancel() // ends a dial in progress
	}
	for _, s := range subs {
		if s == nil {
			continue
		}
		close(s.done)
		s.lost() // wakes every waiter
		// Unblocks read; the error is only ErrClosed or the socket's. Not
		// waited for: it waits for a subscription call in flight, which a
		// master that hangs holds until the ReadTimeout.
		go func() { _ = s.ps.Close() }()
	}
	bounded.Wait(&h.wg, by)
}

// Signal sends on ch unless a send is pending there already.
func Signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// add registers w on the channels names ("" skipped), in one batch.
func (s *subscriber) add(w *Waiter, names ...string) {
	fresh := false
	s.mu.Lock()
	for _, name := range names {
		if name == "" {
			continue
		}
		ch := s.chans[name]
		if ch == nil {
			ch = &channel{waiters: make(map[*Waiter]struct{})}
			s.chans[name] = ch
		}
		ch.waiters[w] = struct{}{}
		ch.idle = time.Time{}
		fresh = fresh || ch.batch == 0
	}
	s.mu.Unlock()
	if fresh {
		Signal(s.kick)
	}
}

// remove unregisters w; a channel left with no waiter for linger is
// unsubscribed by write, so the master stops sending this client releases
// nobody waits for.
func (s *subscriber) remove(w *Waiter, name string) {
	s.mu.Lock()
	ch := s.chans[name]
	delete(ch.waiters, w)
	last := len(ch.waiters) == 0
	if last {
		ch.idle = time.Now()
	}
	s.mu.Unlock()
	if last {
		Signal(s.kick) // write sets its timer for the channel's end
	}
}

// confirmed reports whether a release of channel on this master now
// reaches us: its SUBSCRIBE was followed by a PING that came back on the
// connection that is up. After a lost connection every channel is
// subscribed again (lost), and only the PING after that confirms it.
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

// nextBatch is what the writer sends next, at now: the channels to
// subscribe (given the batch seq) and those that lingered long enough to
// unsubscribe, whether a PING must follow, and when the first channel
// left to linger ends (zero: none).
func (s *subscriber) nextBatch(now time.Time) (sub, unsub []string, next time.Time, ping bool, seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, ch := range s.chans {
		switch {
		case len(ch.waiters) == 0 && !now.Before(ch.idle.Add(linger)):
			unsub = append(unsub, name)
			delete(s.chans, name)
		case len(ch.waiters) == 0:
			if end := ch.idle.Add(linger); next.IsZero() || end.Before(next) {
				next = end
			}
		case ch.batch == 0:
			sub = append(sub, name)
		}
	}
	ping = s.needPing || len(sub) > 0
	s.needPing = false
	s.seq++
	seq = s.seq
	for _, name := range sub {
		s.chans[name].batch = seq
	}
	return sub, unsub, next, ping, seq
}

func (s *subscriber) write(ctx context.Context, h *Hub, i int) {
	failures := 0
	timer := time.NewTimer(linger)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-s.kick:
		case <-timer.C:
		}
		now := time.Now()
		sub, unsub, next, ping, seq := s.nextBatch(now)
		if !next.IsZero() {
			timer.Reset(next.Sub(now))
		}

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
		h.logger.Debug("redlock: subscription write failed; waiters fall back to their timers", "master", h.labels[i], "err", err)
		s.mu.Lock()
		s.needPing = true
		// The batch's SUBSCRIBE may not have gone through: its channels go
		// out again, or the next PING's pong would confirm them (a second
		// SUBSCRIBE of a channel is a no-op).
		for _, name := range sub {
			if ch := s.chans[name]; ch != nil && ch.batch == seq {
				ch.batch = 0
			}
		}
		s.mu.Unlock()
		if !s.pause(backoff(failures)) {
			return
		}
		failures++
		Signal(s.kick)
	}
}

func (s *subscriber) read(ctx context.Context, h *Hub, i int) {
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
			h.logger.Debug("redlock: subscription lost; waiters retry at once", "master", h.labels[i], "err", err)
			s.lost()
			Signal(s.kick)
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
// have been published while it was. Its channels are subscribed again on
// the next connection, by write: go-redis resubscribes them when it
// redials, but the driver seam does not promise it (memredis does not),
// and a master that restarted has forgotten them. SUBSCRIBE to a channel
// the connection has already is a no-op.
func (s *subscriber) lost() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.up, s.needPing = false, true
	for _, ch := range s.chans {
		ch.batch = 0
		for w := range ch.waiters {
			w.mu.Lock()
			if w.marked {
				w.overflowed = true // what it did not receive is not in its log
			}
			w.mu.Unlock()
			Signal(w.wake)
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
			Signal(w.ready)
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
		if w.wants(token, s.i) {
			Signal(w.wake)
		}
	}
}

// Wake is the waiter's channel: a release worth waking for, a lost
// connection, or a nudge of the fair policy.
func (w *Waiter) Wake() chan struct{} { return w.wake }

// Drain forgets a wake-up that came before now.
func (w *Waiter) Drain() {
	select {
	case <-w.wake:
	default:
	}
}

// wants reports whether a release message from master i (the released
// token; "/head" when the key was reserved for a queue's head,
// "/head/token" when it was handed to the head with that token) is worth
// waking for. A handoff to w is recorded for [Waiter.Handed].
func (w *Waiter) wants(msg string, i int) bool {
	token, head, handoff := strings.Cut(msg, "/")
	head, to, _ := strings.Cut(head, "/")
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.marked {
		if len(w.seen) < seenCap {
			w.seen = append(w.seen, released{i, token})
		} else {
			w.overflowed = true
		}
	}
	if token == w.own {
		return false
	}
	wanted := w.holder == "" || w.holder == token
	if handoff && w.id != "" {
		wanted = head == w.id
		if wanted && to != "" {
			// Handed to us, with a token: waking before a majority did
			// would have us try in a round of our own, and lose.
			if i < len(w.handed) {
				w.handed[i] = to
			}
			return to == w.own && w.handedToOwn() >= w.quorum
		}
	}
	if !wanted || w.need == 0 {
		return wanted
	}
	w.got++
	return w.got >= w.need
}

// Mark starts a log of the release messages w receives (any token, any
// master, whether they wake it or not), forgetting the one before: the
// releases that [Waiter.ReleasedAt] asks about. A wait that uses what an
// attempt read on a master, instead of reading it again after
// [Waiter.Drain], marks before the attempt, so that a release drained in
// between is not lost.
func (w *Waiter) Mark() {
	w.mu.Lock()
	w.marked, w.seen, w.overflowed = true, w.seen[:0], false
	w.mu.Unlock()
}

// ListeningAt reports whether master i's subscription has confirmed w's
// channel: a release there from now on reaches w, unless the connection
// is lost (which [Waiter.ReleasedAt] then reports as any release).
func (w *Waiter) ListeningAt(i int) bool {
	channel, _ := w.channels()
	for _, s := range w.subs {
		if s.i == i {
			return s.confirmed(channel)
		}
	}
	return false
}

// ReleasedAt reports whether, since [Waiter.Mark], master i published the
// release of token, or more releases came than the log keeps, or a
// subscription was lost (then any may have been).
func (w *Waiter) ReleasedAt(i int, token string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.overflowed {
		return true
	}
	for _, r := range w.seen {
		if r.i == i && r.token == token {
			return true
		}
	}
	return false
}

// Expect has w wake only once need of the releases it wants came since its
// last attempt: waking at the first of a release's messages, it would try
// before the other masters had let the key go, and lose. Expect(0) counts
// from zero again.
func (w *Waiter) Expect(need int) {
	w.mu.Lock()
	w.need = max(need, 0)
	if need <= 0 {
		w.got = 0
	}
	ready := w.need > 0 && w.got >= w.need
	w.mu.Unlock()
	if ready {
		Signal(w.wake)
	}
}

// SetID makes w a queued waiter of a lock on masters masters, quorum of
// them a majority, whose handoffs come on channel handoffs (HandoffChannel
// of its key and its client's tag), which it subscribes to as well: a
// handoff wakes it only when it names id, and one that hands it the key
// with its own attempt's token (see [Waiter.SetOwn]) only once quorum
// masters did.
func (w *Waiter) SetID(id string, masters, quorum int, handoffs string) {
	w.mu.Lock()
	w.id = id
	w.handed = make([]string, masters)
	w.quorum = quorum
	join := w.handoffs == "" && handoffs != ""
	if join {
		w.handoffs = handoffs
	}
	w.mu.Unlock()
	if join {
		for _, s := range w.subs {
			s.add(w, handoffs)
		}
	}
}

// channels are the channels w is registered on.
func (w *Waiter) channels() (string, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.channel, w.handoffs
}

// handedToOwn counts the masters whose last handoff named w's own token;
// w.mu is held.
func (w *Waiter) handedToOwn() int {
	n := 0
	for _, t := range w.handed {
		if t != "" && t == w.own {
			n++
		}
	}
	return n
}

// Handed reports, for each master in order, the token that the last
// handoff to w's id named there ("": none since SetID), into out.
func (w *Waiter) Handed(out []string) {
	w.mu.Lock()
	copy(out, w.handed)
	w.mu.Unlock()
}

// SetHolder has w wake only on the release of token ("": any release).
func (w *Waiter) SetHolder(token string) {
	w.mu.Lock()
	w.holder = token
	w.mu.Unlock()
}

// SetOwn tells w the token of the attempt it is about to make. The release
// of that token is the attempt's own undo (it lost and frees the keys it
// won): it frees nothing for w, and waking on it would have w try again at
// once, lose the same way and wake itself again, without end while the
// masters stay as they are.
func (w *Waiter) SetOwn(token string) {
	w.mu.Lock()
	w.own = token
	w.mu.Unlock()
}

// Holder is the token w wakes on, "" for any.
func (w *Waiter) Holder() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.holder
}

// Leave unregisters w from every subscription.
func (w *Waiter) Leave() {
	channel, handoffs := w.channels()
	for _, s := range w.subs {
		s.remove(w, channel)
		if handoffs != "" {
			s.remove(w, handoffs)
		}
	}
}

// Listening waits, at most timeout, until a release on quorum masters
// reaches w, and reports whether it does.
func (w *Waiter) Listening(ctx context.Context, quorum int, timeout time.Duration) bool {
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
	channel, handoffs := w.channels()
	var t *time.Timer
	for {
		n := 0
		for _, s := range w.subs {
			if s.confirmed(channel) && (handoffs == "" || s.confirmed(handoffs)) {
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

// Waiting calls f with the waiters of channel on each master that can
// subscribe (for tests that look at who sleeps on what).
func (h *Hub) Waiting(channel string, f func([]*Waiter)) {
	h.each(func(s *subscriber) {
		var ws []*Waiter
		if ch := s.chans[channel]; ch != nil {
			for w := range ch.waiters {
				ws = append(ws, w)
			}
		}
		f(ws)
	})
}

// Subscribed reports whether channel is subscribed on some master: a
// waiter of this client waits on it, or did within the last second.
func (h *Hub) Subscribed(channel string) bool {
	found := false
	h.each(func(s *subscriber) {
		_, ok := s.chans[channel]
		found = found || ok
	})
	return found
}

// each calls f with each subscriber, its mu held.
func (h *Hub) each(f func(*subscriber)) {
	h.mu.Lock()
	subs := h.subs
	h.mu.Unlock()
	for _, s := range subs {
		if s != nil {
			s.mu.Lock()
			f(s)
			s.mu.Unlock()
		}
	}
}

// Subscribers is how many masters the hub has subscriptions to: none before
// the first Join, and none for masters that cannot subscribe.
func (h *Hub) Subscribers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, s := range h.subs {
		if s != nil {
			n++
		}
	}
	return n
}
