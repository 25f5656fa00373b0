package redlock

import (
	"context"
	"log/slog"
	"math"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/fence"
	"quorumlock.dev/internal/nilcheck"
)

// Defaults of the options.
const (
	DefaultNodeTimeout   = 50 * time.Millisecond
	DefaultDriftFactor   = 0.01
	DefaultDriftConstant = 2 * time.Millisecond
	DefaultRetryAttempts = 0 // no cap: Lock waits until it wins or its context ends
	DefaultRetryDelay    = 50 * time.Millisecond
	DefaultRetryJitter   = 50 * time.Millisecond
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
}

func defaults() config {
	return config{
		nodeTimeout:   DefaultNodeTimeout,
		driftFactor:   DefaultDriftFactor,
		driftConstant: DefaultDriftConstant,
		attempts:      DefaultRetryAttempts,
		delay:         DefaultRetryDelay,
		jitter:        DefaultRetryJitter,
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

// WithRetry sets how [Client.Lock] retries: at most attempts attempts in
// all (0, the default: until the context ends). After an attempt lost to a
// holder, Lock waits for the holder's release or expiry (so n attempts may
// take n TTLs); delay plus a uniformly random part of jitter is the wait
// after other failures, and the polling interval when no release can reach
// it (a master without Subscribe, a subscription down). Defaults: 50 ms, 50 ms.
func WithRetry(attempts int, delay, jitter time.Duration) Option {
	return func(c *config) { c.attempts, c.delay, c.jitter = attempts, delay, jitter }
}

// Minter mints the fencing tokens of [WithFence]: a value strictly greater
// than every value it returned before for the resource, within ctx's
// deadline. fence.RedisCounter and pgfence.Counter satisfy it.
type Minter interface {
	Mint(ctx context.Context, resource string) (uint64, error)
}

// NodeMinter is a [Minter] that names the Redis node its counter lives on;
// [New] refuses one whose node is one of the masters. fence.RedisCounter
// satisfies it.
type NodeMinter interface {
	Minter
	Node() driver.Conn
}

var _ NodeMinter = (*fence.RedisCounter)(nil)

// WithFence makes every lock carry a fencing token minted by m after the
// quorum is won (see [Lock.Fence]). m must keep its counter on a node that is
// not one of the masters. A lock is never handed out without its token.
func WithFence(m Minter) Option {
	return func(c *config) { c.minter, c.fenceSet = m, true }
}

// DefaultFairEntryTTL is a sensible entry TTL for [WithFairness].
const DefaultFairEntryTTL = time.Second

// WithFairness makes waiting Lock calls take the lock in the order they
// started waiting: a queue on each master, ordered by an arrival stamp,
// hands a released lock to its head (see docs/design.md, "Fair handoff").
// A waiter's entry expires entryTTL after its last attempt (it refreshes
// it every entryTTL/3), so one that died blocks the queue at most that
// long. When the head is a waiter of the releasing client, Unlock hands it
// the lock in its own release round (no round of the waiter's, no
// message), or, when the client's last queued attempt on the lock showed no
// waiter of another client ahead of the next waiter of its own and the
// lease has three quarters of that waiter's TTL left, passes it on
// in-process with no round at all: same token and lease, a fence of its
// own. One queued attempt covers every waiter of the client listed before
// it (see docs/design.md, "Fair handoff"). 0, the default, turns it off;
// otherwise it must be at least 4 node timeouts. Use one setting for every
// client of a resource.
func WithFairness(entryTTL time.Duration) Option {
	return func(c *config) { c.fairTTL = entryTTL }
}

// WithStrictCheck makes the client refuse to lock while [Client.Check]
// finds a [check.Problem] on a master or the fence counter: every acquisition
// then fails with an error wrapping [ErrUnsafeConfig]. New does no I/O, so
// the check runs at the first acquisition, which waits for it; its outcome
// is kept, so a setting changed later is not seen (run Check on a schedule
// for that). A node that did not answer is checked again, at most once a
// second. Unknown settings (CONFIG disabled) do not refuse.
func WithStrictCheck() Option {
	return func(c *config) { c.strict = true }
}

// WithRestartGuard makes the client watch each master's run_id and uptime
// (INFO server) every interval, and again when a master answers after
// failed calls. A master that started less than the longest TTL this
// client has issued ago does not count toward a quorum until that long has
// passed since its start: it gets the SET and every release, but its vote
// is not counted. This is the spec's delayed restart, enforced by the
// client. A master whose INFO is refused is never quarantined (logged once
// at Warn). The acquire path reads cached state only. 0, the default, turns
// it off; otherwise interval must be at least the node timeout. See
// docs/design.md, "Restart guard", for what it cannot see.
func WithRestartGuard(interval time.Duration) Option {
	return func(c *config) { c.restartInterval = interval; c.setWatcher() }
}

// WithClockMonitor makes the client read each master's TIME every interval
// against its own monotonic clock, estimate the master's clock rate over
// the last 32 readings and see its clock step (a jump or a change of rate).
// A rate beyond the drift factor of [WithDrift], or a step beyond the drift
// constant (at least 1 ms) plus the round trips, is logged at Warn and told
// to [Hooks].MasterDrift and MasterClockJumped. With quarantine, a master whose clock stepped
// forward or runs fast does not count toward a quorum until the longest TTL
// issued has passed since that ended, as [WithRestartGuard] does after a
// restart. A step is seen at the next reading only: acquisitions before it
// count the master. interval is 0 (off, the default) or at least the node
// timeout; with the restart guard, one watcher serves both at the shorter
// interval. See docs/design.md, "Clock-rate monitor".
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

// WithHooks sets who is told of attempts, votes, extensions, waits,
// renewal failures, quarantines and clock drift (see [Hooks]), for example
// a metrics adapter. The default tells no one.
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
