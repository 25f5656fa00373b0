// Package faultproxy is an in-process TCP proxy between clients and one upstream server that
// injects network faults on demand: added latency, a hang, refused connections and resets.
// Tests use it to make one Redis master slow or unreachable, and the benchmark CLI uses it for
// its slow-master scenario, so data passes through without copying into queues or timers
// unless a delay is set. It listens on 127.0.0.1 only, proxies a single upstream address, and
// does not simulate packet loss, bandwidth limits or partial writes.
package faultproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

const (
	bufSize = 32 << 10
	// queueLen bounds the delayed chunks of one connection; a client that sends faster than
	// the delay drains then blocks, as it would on a full TCP window.
	queueLen    = 256
	dialTimeout = 5 * time.Second
)

// Proxy forwards every connection accepted on [Proxy.Addr] to its upstream address. Its
// methods are safe for concurrent use; faults apply to existing and new connections alike.
type Proxy struct {
	upstream string
	addr     string
	state    atomic.Pointer[state]

	mu     sync.Mutex
	ln     net.Listener // nil while refusing or closed
	links  map[*link]struct{}
	closed bool

	wg sync.WaitGroup // every goroutine the proxy started
}

// state is the fault configuration. It is replaced, never changed, so that the forwarding path
// reads it with one atomic load, and closing changed wakes everyone waiting on the old one.
type state struct {
	delay   time.Duration
	hung    bool
	changed chan struct{}
}

// link is one client connection and its upstream connection.
type link struct {
	p      *Proxy
	client net.Conn
	ctx    context.Context // ends when the link closes
	cancel context.CancelFunc

	mu     sync.Mutex
	server net.Conn // nil until dialled
	closed bool

	queue   chan chunk   // client->server chunks waiting for their delay
	pending atomic.Int64 // chunks queued and not yet written
}

type chunk struct {
	b    []byte
	read time.Time
}

// New starts a proxy to upstream on a free 127.0.0.1 port. Upstream is dialled for each
// accepted connection, so it need not be up yet.
func New(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: %w", err)
	}
	p := &Proxy{upstream: upstream, addr: ln.Addr().String(), links: make(map[*link]struct{})}
	p.state.Store(&state{changed: make(chan struct{})})
	p.ln = ln
	p.wg.Add(1)
	go p.accept(ln)
	return p, nil
}

// Addr returns the "127.0.0.1:port" address clients dial. It stays the same after Refuse.
func (p *Proxy) Addr() string { return p.addr }

// SetDelay delays data from clients to the server: each chunk is written d after it was read,
// in order, while later chunks are read meanwhile, so latency grows but throughput does not
// shrink. Replies are not delayed. Zero restores pass-through. SetDelay panics if d < 0.
func (p *Proxy) SetDelay(d time.Duration) {
	if d < 0 {
		panic("faultproxy: negative delay")
	}
	p.update(func(s *state) { s.delay = d })
}

// Hang stops forwarding in both directions, as a stopped server would: connections stay open,
// new ones are accepted, and reads on them time out. Data read meanwhile is held and delivered,
// in order, by [Proxy.Heal].
func (p *Proxy) Hang() { p.update(func(s *state) { s.hung = true }) }

// Refuse closes the listener and every connection, so that dials fail with "connection
// refused" until [Proxy.Heal].
func (p *Proxy) Refuse() { p.shut(false, true) }

// Reset closes every current connection with a TCP reset and goes on accepting new ones.
func (p *Proxy) Reset() {
	p.mu.Lock()
	links := p.takeLinks()
	p.mu.Unlock()
	for l := range links {
		l.close(true)
	}
}

// Heal restores pass-through: no delay, no hang, and, after Refuse, a listener on the same
// address. It fails if that address has been taken meanwhile or the proxy is closed.
func (p *Proxy) Heal() error {
	p.update(func(s *state) { s.delay, s.hung = 0, false })
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("faultproxy: heal: %w", net.ErrClosed)
	}
	if p.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return fmt.Errorf("faultproxy: listen again: %w", err)
	}
	p.ln = ln
	p.wg.Add(1)
	go p.accept(ln)
	return nil
}

// Close closes the listener and every connection and returns once all the proxy's goroutines
// have exited. Data held by a delay or a hang is dropped.
func (p *Proxy) Close() error {
	p.shut(true, false)
	p.wg.Wait()
	return nil
}

// shut closes the listener and every connection (with a TCP reset when reset
// is set); closed marks the proxy closed for good.
func (p *Proxy) shut(closed, reset bool) {
	p.mu.Lock()
	p.closed = p.closed || closed
	ln := p.ln
	p.ln = nil
	links := p.takeLinks()
	p.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	for l := range links {
		l.close(reset)
	}
}

// Conns returns the number of open client connections.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

func (p *Proxy) update(f func(*state)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.state.Load()
	next := &state{delay: old.delay, hung: old.hung, changed: make(chan struct{})}
	f(next)
	p.state.Store(next)
	close(old.changed)
}

// takeLinks empties the connection set and returns its old contents, so that the links can be
// closed without p.mu held (closing a link takes p.mu to forget it). The caller holds p.mu.
func (p *Proxy) takeLinks() map[*link]struct{} {
	links := p.links
	p.links = make(map[*link]struct{})
	return links
}

func (p *Proxy) forget(l *link) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.links, l)
}

func (p *Proxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			// Such as EMFILE: retrying at once would spin.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		p.mu.Lock()
		if p.ln != ln {
			// Refused or closed between Accept and here.
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		l := &link{p: p, client: c, ctx: ctx, cancel: cancel, queue: make(chan chunk, queueLen)}
		p.links[l] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.relay(l)
	}
}

// relay dials upstream for l and forwards data both ways until either side closes.
func (p *Proxy) relay(l *link) {
	defer p.wg.Done()
	d := net.Dialer{Timeout: dialTimeout}
	server, err := d.DialContext(l.ctx, "tcp", p.upstream)
	if err != nil {
		l.close(false)
		return
	}
	if !l.attach(server) {
		return
	}
	p.wg.Add(2)
	go p.readClient(l, server)
	go p.writeDelayed(l, server)
	p.readServer(l, server)
}

// readClient forwards client data to the server itself while there is no delay, and through
// l.queue to writeDelayed otherwise. Once a chunk is queued, later chunks queue behind it until
// the queue is empty, which keeps them in order when the delay is lifted.
func (p *Proxy) readClient(l *link, server net.Conn) {
	defer p.wg.Done()
	// writeDelayed closes the link once it has written everything queued before EOF.
	defer close(l.queue)
	buf := make([]byte, bufSize)
	for {
		n, err := l.client.Read(buf)
		if n > 0 {
			if !p.waitWhileHung(l) {
				return
			}
			if p.state.Load().delay > 0 || l.pending.Load() > 0 {
				l.pending.Add(1)
				select {
				case l.queue <- chunk{b: bytes.Clone(buf[:n]), read: time.Now()}:
				case <-l.ctx.Done():
					return
				}
			} else if _, err := server.Write(buf[:n]); err != nil {
				l.close(false)
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) writeDelayed(l *link, server net.Conn) {
	defer p.wg.Done()
	// Closing on the client's EOF rather than half-closing: Redis clients never half-close.
	defer l.close(false)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for c := range l.queue {
		if !p.waitUntilDue(l, c.read, timer) {
			return
		}
		if _, err := server.Write(c.b); err != nil {
			return
		}
		l.pending.Add(-1)
	}
}

func (p *Proxy) readServer(l *link, server net.Conn) {
	defer l.close(false)
	buf := make([]byte, bufSize)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			if !p.waitWhileHung(l) {
				return
			}
			if _, err := l.client.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// waitWhileHung returns true once the proxy is not hung, false if the link closes first.
func (p *Proxy) waitWhileHung(l *link) bool {
	for {
		s := p.state.Load()
		if !s.hung {
			return true
		}
		select {
		case <-s.changed:
		case <-l.ctx.Done():
			return false
		}
	}
}

// waitUntilDue returns true once a chunk read at read has waited out the current delay and the
// proxy is not hung, false if the link closes first. It rereads the delay whenever it changes,
// so that lowering it releases chunks already waiting.
func (p *Proxy) waitUntilDue(l *link, read time.Time, timer *time.Timer) bool {
	for {
		s := p.state.Load()
		var due <-chan time.Time
		if !s.hung {
			if s.delay == 0 {
				return true
			}
			wait := time.Until(read.Add(s.delay))
			if wait <= 0 {
				return true
			}
			timer.Reset(wait)
			due = timer.C
		}
		select {
		case <-due:
		case <-s.changed:
		case <-l.ctx.Done():
			return false
		}
	}
}

// attach records the upstream connection, or closes it and returns false if the link closed
// while it was being dialled.
func (l *link) attach(server net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		_ = server.Close()
		return false
	}
	l.server = server
	return true
}

// close closes both connections; with reset, the client gets a TCP reset instead of an EOF.
func (l *link) close(reset bool) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	l.cancel()
	if tc, ok := l.client.(*net.TCPConn); ok && reset {
		_ = tc.SetLinger(0)
	}
	_ = l.client.Close()
	if l.server != nil {
		_ = l.server.Close()
	}
	l.mu.Unlock()
	l.p.forget(l)
}
