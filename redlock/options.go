package redlock

import (
	"context"
	"log/slog"
	"math"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/fence"
	"quorumlock.dev/internal/nilcheck"
	"quorumlock.dev/internal/seam"
)

// Defaults of the options, stated in each option's doc.
const (
	defaultNodeTimeout   = 50 * time.Millisecond
	defaultDriftFactor   = 0.01
	defaultDriftConstant = 2 * time.Millisecond
	defaultRetryAttempts = 0 // no cap: Lock waits until it wins or its context ends
	defaultRetryDelay    = 50 * time.Millisecond
	defaultRetryJitter   = 50 * time.Millisecond
	defaultFairEntryTTL  = time.Second // the entry TTL WithFairness's doc suggests
)

// Option configures a Client; see [New].
type Option func(*config)

type config struct {
	nodeTimeout   time.Duration
	driftFactor   float64
	driftConstant time.Duration
	attempts      int
	delay, jitter time.Duration
	minter        Minter
	fenceSet      bool
	logger        *slog.Logger
	hooks         Hooks
	fairTTL       time.Duration // 0: waiters are not queued
	strict        bool
	gate          *strictGate // one per client, whatever options it shares
	// The background watcher: the restart guard, the clock monitor, or both.
	restartInterval time.Duration // 0: no restart guard
	clockInterval   time.Duration // 0: no clock monitor
	clockQuarantine bool
	guardInterval   time.Duration // the watcher's: the shorter of the two set; 0: no watcher
	// The simulator's (package internal/seam): nil, the system's.
	seamClock seam.Clock
	rnd       seam.Rand
}

func defaults() config {
	return config{
		nodeTimeout:   defaultNodeTimeout,
		driftFactor:   defaultDriftFactor,
		driftConstant: defaultDriftConstant,
		attempts:      defaultRetryAttempts,
		delay:         defaultRetryDelay,
		jitter:        defaultRetryJitter,
		logger:        slog.New(slog.DiscardHandler),
		gate:          new(strictGate),
	}
}

// WithNodeTimeout bounds each call to one master (default 50 ms), the wait
// for a pooled connection included. The client enforces it itself, whatever
// the go-redis client's own timeouts: a master that hangs costs an attempt
// at most this long. A TTL must leave more than this after the drift
// allowance.
func WithNodeTimeout(d time.Duration) Option {
	return func(c *config) { c.nodeTimeout = d }
}

// WithDrift sets the clock-drift allowance subtracted from every lease:
// factor·ttl + constant (default 0.01 and 2 ms). factor must be in [0, 0.5).
func WithDrift(factor float64, constant time.Duration) Option {
	return func(c *config) { c.driftFactor, c.driftConstant = factor, constant }
}

// WithRetry caps [Client.Lock] at attempts attempts in all (0, the default:
// until the context ends). It bounds attempts, not time: after a loss to a
// live holder the next attempt waits for its release or its keys' expiry,
// so n attempts can take n TTLs; bound the time with ctx's deadline. delay
// plus a uniformly random part of jitter (defaults 50 ms and 50 ms) is its
// wait after a failure other than a loss to a holder, and its polling
// interval when no release can reach it; see docs/design.md, "Waiting for a
// held lock" (with each peer's usual retry and its equivalent here).
func WithRetry(attempts int, delay, jitter time.Duration) Option {
	return func(c *config) { c.attempts, c.delay, c.jitter = attempts, delay, jitter }
}

// Minter mints the fencing tokens of [WithFence]: a value strictly greater
// than every value it returned before for the resource, within ctx's
// deadline. fence.RedisCounter and pgfence.Counter satisfy it.
type Minter interface {
	Mint(ctx context.Context, resource string) (uint64, error)
}

// nodeMinter is a [Minter] that names the Redis node its counter lives on
// (fence.RedisCounter does): [New] refuses one whose node is a master, and
// [Client.Check] checks that node too.
type nodeMinter interface {
	Minter
	Node() driver.Conn
}

var (
	_ nodeMinter  = (*fence.RedisCounter)(nil)
	_ fenceReader = (*fence.RedisCounter)(nil)
)

// WithFence makes every lock carry a fencing token minted by m after the
// quorum is won (see [Lock.Fence]). m must keep its counter on a node that is
// not one of the masters. A lock is never handed out without its token.
func WithFence(m Minter) Option {
	return func(c *config) { c.minter, c.fenceSet = m, true }
}

// WithFairness makes waiting Lock calls take the lock in the order they
// started waiting, a release handing it to the next waiter (docs/design.md,
// "Fair handoff"); a waiter that died holds up the queue at most entryTTL,
// or the TTL of the lock it waited for when a release handed it the key
// before its entry expired (as a holder that died does). 0, the default, turns it off; otherwise entryTTL must be at least 4 node
// timeouts (1 s suits most). Give every client of a resource the same setting:
// while fair waiters keep queuing, a client without it finds the key reserved
// for the queue's head after every release, and waits as long as they keep
// coming.
func WithFairness(entryTTL time.Duration) Option {
	return func(c *config) { c.fairTTL = entryTTL }
}

// WithStrictCheck makes the client refuse to lock while [Client.Check] finds
// a [check.Problem] on a master or the fence counter: acquisitions then fail
// with an error wrapping [check.ErrUnsafe]. The first acquisition runs the
// check and waits for it; its outcome is kept once every node has answered,
// and unknown settings do not refuse. See docs/operations.md, "Checking masters".
func WithStrictCheck() Option {
	return func(c *config) { c.strict = true }
}

// WithRestartGuard makes the client read each master's run_id and uptime
// every interval (0, the default: off; else at least the node timeout). A
// master that started less than the longest TTL this client issued ago does
// not count toward a quorum until that long after its start. A master that
// refuses INFO is never held out; see docs/design.md, "Restart guard".
func WithRestartGuard(interval time.Duration) Option {
	return func(c *config) { c.restartInterval = interval; c.setWatcher() }
}

// WithClockMonitor makes the client read each master's TIME every interval
// (0, the default: off; else at least the node timeout), log at Warn a clock
// that steps or strays beyond [WithDrift] and tell [Hooks]. With quarantine,
// such a master (stepped forward, or fast) does not count toward a quorum for
// the longest TTL issued; see docs/design.md, "Clock-rate monitor".
func WithClockMonitor(interval time.Duration, quarantine bool) Option {
	return func(c *config) { c.clockInterval, c.clockQuarantine = interval, quarantine; c.setWatcher() }
}

// setWatcher sets the watcher's interval: one loop samples for both the
// restart guard and the clock monitor.
func (c *config) setWatcher() {
	c.guardInterval = 0
	for _, d := range []time.Duration{c.restartInterval, c.clockInterval} {
		if d > 0 && (c.guardInterval == 0 || d < c.guardInterval) {
			c.guardInterval = d
		}
	}
}

// WithLogger sets where the client logs: a renewal that ended a lock and a
// fence counter that went backwards at Error, failed cleanups and masters in
// trouble at Warn, attempts at Debug. The default discards.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.logger = l }
}

// WithHooks sets who is told of acquisitions, attempts, votes, waits,
// holds, extensions, quarantines and clock drift (see [Hooks]): a metrics
// adapter or a tracer. The default tells no one.
func WithHooks(h Hooks) Option {
	return func(c *config) { c.hooks = h }
}

func (c *config) validate() error {
	switch {
	case c.nodeTimeout <= 0:
		return invalid("node timeout %v is not positive", c.nodeTimeout)
	case math.IsNaN(c.driftFactor) || c.driftFactor < 0 || c.driftFactor >= 0.5:
		return invalid("drift factor %v is outside [0, 0.5)", c.driftFactor)
	case c.driftConstant < 0:
		return invalid("drift constant %v is negative", c.driftConstant)
	case c.attempts < 0:
		return invalid("retry attempts %d is negative", c.attempts)
	case c.delay < 0 || c.jitter < 0:
		return invalid("retry delay %v and jitter %v must not be negative", c.delay, c.jitter)
	case c.fenceSet && nilcheck.Is(c.minter):
		return invalid("nil fence minter")
	case c.fairTTL < 0 || (c.fairTTL > 0 && c.fairTTL < 4*c.nodeTimeout):
		return invalid("fair entry TTL %v is neither 0 nor at least 4 node timeouts (%v)", c.fairTTL, 4*c.nodeTimeout)
	case c.restartInterval < 0 || (c.restartInterval > 0 && c.restartInterval < c.nodeTimeout):
		return invalid("restart guard interval %v is neither 0 nor at least the node timeout (%v)", c.restartInterval, c.nodeTimeout)
	case c.clockInterval < 0 || (c.clockInterval > 0 && c.clockInterval < c.nodeTimeout):
		return invalid("clock monitor interval %v is neither 0 nor at least the node timeout (%v)", c.clockInterval, c.nodeTimeout)
	case nilcheck.Is(c.logger):
		return invalid("nil logger")
	}
	return nil
}
