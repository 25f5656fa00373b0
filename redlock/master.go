package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"quorumlock.dev/driver"
)

// errStuck is the error of a master that a round did not call because the
// master has not replied for longer than the node timeout (see health).
var errStuck = errors.New("redlock: skipped: this master has not replied for longer than the node timeout")

// errNotProbed is the call of a master that an attempt did not make
// because the master it asked first refused (see probeMaster).
var errNotProbed = errors.New("redlock: not asked: the master asked first refused")

// errNotAsked is the call of a master that an attempt did not make because
// the round ended while it waited for the master asked first.
var errNotAsked = errors.New("redlock: not asked: the round ended while the master asked first had not answered")

// probeMaster is the master that attempts woken by a release ask first:
// the same for every client of resource (an FNV hash of its name), or the
// next one whose last call got a reply and whose votes count. Only the
// attempt that wins it asks the others, so that waiters woken by one
// release do not split the votes between them (docs/design.md, "Waiting
// for a held lock").
func (c *Client) probeMaster(resource string) int {
	h := uint32(2166136261)
	for i := 0; i < len(resource); i++ {
		h = (h ^ uint32(resource[i])) * 16777619
	}
	n := len(c.masters)
	for k := range n {
		i := (int(h%uint32(n)) + k) % n
		if !c.health[i].failedLast.Load() && !c.watcher.Quarantined(i) {
			return i
		}
	}
	return -1
}

// health is what the client knows of one master's responsiveness: a
// breaker that stops piling calls up behind a master that hangs, and stops
// spending calls on one that is down.
//
// A master is out when it has not replied for longer than outAfter node
// timeouts and either calls to it have been in flight all that time (it
// hangs) or every call that returned in that time failed without a reply
// (it is down). Time it spent idle does not count. A round then
// does not call it but counts it as failed at once, except for a probe: one
// at a time, at most one per node timeout (the calls that come at the very
// instant of a probe, by the client's clock, probe with it: which of two
// rounds begun at one instant probes does not then depend on which
// goroutine ran first, and a simulated schedule replays its trace). The
// first reply (to the probe or to a call that was stuck) closes the breaker. Whether out or not, a call
// to a hung master holds a goroutine for at most the node timeout, except
// those that got a pooled connection: they wait in a read until go-redis's
// ReadTimeout, at most PoolSize of them. So what a hung master holds is at
// most its pool plus the calls of one node timeout, and once it is out, one
// probe instead of those calls.
type health struct {
	inflight   atomic.Int64
	busySince  atomic.Int64 // when inflight last rose from 0, in ns on the client's clock
	lastReply  atomic.Int64 // when the master last replied, in ns on the client's clock
	failedLast atomic.Bool  // the last call that returned got no reply
	failing    atomic.Int64 // when the calls began to fail without a reply
	probeMu    sync.Mutex
	lastProbe  int64 // when the last probe started; probeMu guards it and probes
	probes     int   // probes in flight
	// The last call that got no reply, for the errors of calls that then
	// time out (see masterError).
	lastFailure   atomic.Pointer[failure]
	lastDiagnosis atomic.Int64                  // when the last diagnosing dial started (see diagnose)
	diagnosis     atomic.Pointer[chan struct{}] // closed when the diagnosing dial in flight ends; nil: none
}

type failure struct {
	err error
	at  int64 // ns on the client's clock
}

// outAfter is how many node timeouts without a reply take a master out. More
// than one, so that a master that is only overloaded, answering late but
// answering, is not taken out and put back over and over.
const outAfter = 4

// enter is called before a call to the master at now (ns), with the node
// timeout in ns; it returns false when the call must not be made. A true
// probe must be passed to exit.
func (h *health) enter(now, timeout int64) (ok, probe bool) {
	n := h.inflight.Load()
	quiet := outAfter * timeout
	hangs := n > 0 && now-h.busySince.Load() > quiet
	down := h.failedLast.Load() && now-h.failing.Load() > quiet
	if now-h.lastReply.Load() > quiet && (hangs || down) {
		h.probeMu.Lock()
		ok := h.probes == 0 && now-h.lastProbe >= timeout || h.probes > 0 && now == h.lastProbe
		if ok {
			h.probes++
			h.lastProbe = now
		}
		h.probeMu.Unlock()
		if !ok {
			return false, false
		}
		probe = true
	}
	if n == 0 {
		// Before the increment, so that nobody sees calls in flight with
		// the start of an earlier busy spell.
		h.busySince.Store(now)
	}
	h.inflight.Add(1)
	return true, probe
}

// exit is called when the call returns; replied says whether the master
// itself answered (a reply or an error reply, not a network error or a
// timeout). back reports the first reply after calls that got none: the
// master may have restarted in between.
func (h *health) exit(now int64, probe, replied bool) (back bool) {
	if replied {
		h.lastReply.Store(now)
		back = h.failedLast.Swap(false)
	} else if !h.failedLast.Swap(true) {
		h.failing.Store(now)
	}
	h.inflight.Add(-1)
	if probe {
		h.probeDone()
	}
	return back
}

// probeDone ends a probe.
func (h *health) probeDone() {
	h.probeMu.Lock()
	h.probes--
	h.probeMu.Unlock()
}

// abstain is exit for a call that tells nothing of the master: the
// caller's context ended it.
func (h *health) abstain(probe bool) {
	h.inflight.Add(-1)
	if probe {
		h.probeDone()
	}
}

// evalInt runs script on m and reads an integer reply.
func evalInt(ctx context.Context, m driver.Conn, script *driver.Script, keys []string, args ...any) (int64, error) {
	v, err := m.Eval(ctx, script, keys, args...)
	if err != nil {
		return 0, err
	}
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("%w: %v (%T) from a script that returns an integer", driver.ErrUnexpectedReply, v, v)
	}
	return n, nil
}

// evalSlice runs script on m and reads an array reply.
func evalSlice(ctx context.Context, m driver.Conn, script *driver.Script, keys []string, args ...any) ([]any, error) {
	v, err := m.Eval(ctx, script, keys, args...)
	if err != nil {
		return nil, err
	}
	vals, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: %v (%T) from a script that returns an array", driver.ErrUnexpectedReply, v, v)
	}
	return vals, nil
}

// neverSent reports an error that proves a command never reached master i:
// the breaker held it back, a handoff round left it to the plain release, or the connection could not be dialled by a
// client that does not retry (a client that retries may have written the
// command on an earlier try, and reports only the last one's error).
func (c *Client) neverSent(i int, err error) bool {
	if errors.Is(err, errStuck) || errors.Is(err, errNotHanded) || errors.Is(err, errNotProbed) || errors.Is(err, errNotAsked) {
		return true
	}
	var op *net.OpError
	return c.noRetry[i] && errors.As(err, &op) && op.Op == "dial"
}

// clock is the time the client reads: the monotonic clock for every bound,
// and a clock that also counts time the machine spent suspended, which
// the monotonic clock on Linux does not, but the masters' key expiry does.
type clock interface {
	now() (time.Time, time.Duration)
}

func (c *Client) nanos() int64 { return int64(time.Since(c.epoch)) }

func masterLabel(i int, addr string) string {
	if addr == "" {
		return fmt.Sprintf("master %d", i)
	}
	return addr
}
