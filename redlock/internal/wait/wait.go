// Package wait is what the lock's core and its wait policies agree on: the
// core's loop (redlock's Client.wait) asks a Policy for a Waiter per Lock
// call and knows nothing else of how the call waits; an attempt asks the
// masters through the waiter's Asker. Base is what every waiter has (its
// timer, the Waiting hook, the back-off after wake-ups that led nowhere).
//
// The policies are packages of their own below the core (plain, and the
// fair one in redlock while it moves), each given the core through an
// interface of its own, generic in the core's lock type L, so that none of
// them imports redlock. docs/design.md ("Waiting for a held lock") says
// why each is built as it is.
package wait

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/quorum"
	"quorumlock.dev/redlock/internal/push"
)

// ErrNotAsked is the call of a master that an attempt did not make: its
// asker held it back (the master asked first refused, or the round ended
// before it answered). It says nothing of the master: no vote, no outage,
// nothing to release.
var ErrNotAsked = errors.New("redlock: not asked")

// Core is what every policy asks of the lock's core, for locks of type L;
// each policy's own Core adds what only it needs.
type Core[L any] interface {
	Masters() int
	Quorum() int
	NodeTimeout() time.Duration
	// Hub is the client's subscriptions, which wake waiters.
	Hub() *push.Hub
	// Stream is a random stream of a call's own (nil: the process's).
	Stream() *rand.Rand
	WaitConfig() Config
	// NewLock is a lock on resource with token, not held yet.
	NewLock(resource, token string) L
	// Attempt is one round on l's keys, asked by a (nil: SET NX).
	Attempt(ctx context.Context, l L, ttl time.Duration, a Asker[L]) (L, *quorum.Round, error)
	// Enter passes master i's breaker before a call to Master(i) on ctx
	// (err: the call must not be made: the breaker holds it back, or the
	// master refuses connections); Exit records how the call ended.
	Enter(ctx context.Context, i int) (probe bool, err error)
	Exit(ctx context.Context, i int, probe bool, err error)
	Master(i int) driver.Conn
}

// Call is one call to master i of c: f on its connection, through the
// master's breaker (see Core.Enter).
func Call[T, L any](c Core[L], ctx context.Context, i int, f func(context.Context, driver.Conn) (T, error)) (T, error) {
	probe, err := c.Enter(ctx, i)
	if err != nil {
		var zero T
		return zero, err
	}
	v, err := f(ctx, c.Master(i))
	c.Exit(ctx, i, probe, err)
	return v, err
}

// A Policy is a Client's way of waiting, chosen once by New.
type Policy[L any] interface {
	// Join makes the waiting state of one Lock call, before its first
	// attempt (a fair call may queue behind its client's waiters here,
	// and fail when ctx ends). A waiter it returns is ended, err or not.
	Join(ctx context.Context, resource string, ttl time.Duration) (Waiter[L], error)
	// Unlock is Unlock's chance to hand l on to a waiter of this client,
	// given the lease l had (until, and untilBoot on the clock that counts
	// suspend) and the cause of its end before Unlock (nil: it had not
	// ended). done: handed on, and err is Unlock's outcome; otherwise l
	// is released as usual, and then after, when not nil, runs.
	Unlock(ctx context.Context, l L, until time.Time, untilBoot time.Duration, lost error) (done bool, after func(), err error)
}

// A Waiter is one Lock call between its attempts.
type Waiter[L any] interface {
	// Try makes the next attempt, or takes a lock handed to the call;
	// tried is false when a lock was handed over just as an attempt was
	// to start (the loop takes it next).
	Try(ctx context.Context) (l L, round *quorum.Round, err error, tried bool)
	// Sleep waits after the lost attempt round (err its error; held: it
	// lost to a holder, ErrNotAcquired). It returns an error only when
	// ctx ends.
	Sleep(ctx context.Context, round *quorum.Round, err error, held bool) error
	// End undoes what waiting made, whether the call won or not.
	End(ctx context.Context)
}

// An Asker is how a policy's attempt asks each master (the fair queued
// call, the plain policy's probe master first); nil asks every master at
// once to set the keys.
type Asker[L any] interface {
	// Prepare readies the attempt on l, once the round is to start. grace
	// is how much longer than the node timeout the round may last, for
	// the calls the asker sends late (a probed attempt's, to the masters
	// it asks after the probe master): each of them gets a node timeout.
	Prepare(l L, ttl time.Duration) (grace time.Duration)
	// Ask is master i's call of the attempt: true when l's key is ours.
	Ask(ctx context.Context, i int, l L, ttl time.Duration) (bool, error)
	// Asked hears of the round once it is decided, with its start on both
	// clocks, before its outcome is.
	Asked(l L, round *quorum.Round, start time.Time, boot time.Duration)
	// Unasked reports a master whose call in round says nothing of it,
	// whatever the round recorded: the asker never made it.
	Unasked(round *quorum.Round, i int) bool
}

// Script is a script with its arguments, for a lock's keys: what a policy
// has the core run instead of its own release.
type Script struct {
	Script *driver.Script
	Args   []any
}

// Config is what a waiter's Base reads of its client.
type Config struct {
	Delay, Jitter time.Duration // the wait after a loss no holder explains
	Waiting       func(delta int)
	Logger        *slog.Logger
}

// WakeJitter spreads the waiters that wake at one expiry, so that they do
// not all send their SETs at the same instant.
const WakeJitter = time.Millisecond

// MaxWakeBackoff bounds the random wait before an attempt after
// consecutive wake-ups that each led to a lost attempt (see Base.woke).
const MaxWakeBackoff = 16 * time.Millisecond

// Base is what every waiter has: the call, its timer, the Waiting hook, and
// the count of wake-ups in a row that led to lost attempts.
type Base[L comparable] struct {
	Config
	Resource string
	TTL      time.Duration
	Rnd      *rand.Rand // the call's random stream (nil: the process's; see RandN)
	timer    *time.Timer
	waiting  bool // the Waiting hook was told that this call waits
	woken    int  // sleeps in a row that a release cut short (see woke)
}

// Poll is the wait after a loss that no holder explains: the retry delay
// and its jitter. The first one tells the Waiting hook.
func (b *Base[L]) Poll() time.Duration {
	b.Listed()
	wait := b.Delay
	if b.Jitter > 0 {
		wait += RandN(b.Rnd, b.Jitter)
	}
	return wait
}

// Listed tells the Waiting hook, once, that this call waits.
func (b *Base[L]) Listed() {
	if !b.waiting && b.Waiting != nil {
		b.waiting = true
		b.Waiting(1)
	}
}

// Rest sleeps wait, cut short by a message on wake (then woke decides)
// or by a lock handed over on grant (returned); err is the lost attempt's,
// joined with ctx.Err() when ctx ends. A nil channel never fires. first is
// the pause of a first wake-up in a row, and fresh makes this one a first
// (see woke).
func (b *Base[L]) Rest(ctx context.Context, wait time.Duration, wake <-chan struct{}, grant <-chan L, first func() time.Duration, fresh bool, err error) (L, error) {
	var none L
	b.Logger.Debug("redlock: retrying", "resource", b.Resource, "wait", wait, "err", err)
	// What is ready already is taken in an order of its own, not by a
	// select that picks one at random (a seed of the simulator replays its
	// trace only if the order is fixed): a lock handed to us first.
	select {
	case h := <-grant:
		b.woken = 0
		return h, nil
	default:
	}
	if wait <= 0 {
		// At once (the holders' keys are gone from a majority): a
		// release since is no news to the attempt, which reads the masters.
		if wake != nil {
			select {
			case <-wake:
			default:
			}
		}
		b.woken = 0
		if cerr := ctx.Err(); cerr != nil {
			return none, errors.Join(err, cerr)
		}
		return none, nil
	}
	select {
	case <-wake:
		return b.woke(ctx, grant, first, fresh, err)
	default:
	}
	b.arm(wait)
	select {
	case <-b.timer.C:
		b.woken = 0
	case <-wake:
		return b.woke(ctx, grant, first, fresh, err)
	case h := <-grant:
		b.woken = 0
		return h, nil
	case <-ctx.Done():
		return none, errors.Join(err, ctx.Err())
	}
	return none, nil
}

// woke follows a release that cut the sleep short. The first one in a
// row (or a fresh one: the plain policy's attempt that lost at its probe
// master to the one waiter that won it, with no votes split) waits first()
// (the plain policy's probe jitter; nothing for the others) and goes to an
// attempt: the fastest way to a released lock.
// When the attempt it led to lost as well, the releases may be those of
// other waiters that lost with us (the votes split): each next one waits
// a random part of a window that grows by WakeJitter per wake, up to
// MaxWakeBackoff, so that the waiters stop trying in step. Without it, two
// waiters whose attempts kept splitting the masters woke each other for
// ever, in the simulator in one instant of virtual time.
func (b *Base[L]) woke(ctx context.Context, grant <-chan L, first func() time.Duration, fresh bool, err error) (L, error) {
	var none L
	var wait time.Duration
	if b.woken++; fresh {
		b.woken = 1
	}
	if b.woken == 1 {
		if first != nil {
			wait = first()
		}
	} else {
		wait = RandN(b.Rnd, min(time.Duration(b.woken-1)*WakeJitter, MaxWakeBackoff))
	}
	if wait <= 0 {
		return none, nil
	}
	select {
	case h := <-grant: // see Rest
		b.woken = 0
		return h, nil
	default:
	}
	b.arm(wait)
	select {
	case <-b.timer.C:
	case h := <-grant:
		b.woken = 0
		return h, nil
	case <-ctx.Done():
		return none, errors.Join(err, ctx.Err())
	}
	return none, nil
}

// arm sets the call's timer to fire after wait.
func (b *Base[L]) arm(wait time.Duration) {
	if b.timer == nil {
		b.timer = time.NewTimer(wait)
	} else {
		b.timer.Reset(wait)
	}
}

// Stop stops the timer and tells the Waiting hook that the call waits no
// more.
func (b *Base[L]) Stop() {
	if b.timer != nil {
		b.timer.Stop()
	}
	if b.waiting {
		b.Waiting(-1)
	}
}

// RandN returns a uniform duration in [0, d) drawn from r (nil: the
// process's source); d > 0.
func RandN(r *rand.Rand, d time.Duration) time.Duration {
	if r == nil {
		return rand.N(d)
	}
	return time.Duration(r.Int64N(int64(d)))
}

// EvalInt runs script on m and reads an integer reply.
func EvalInt(ctx context.Context, m driver.Conn, script *driver.Script, keys []string, args ...any) (int64, error) {
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

// EvalSlice runs script on m and reads an array reply.
func EvalSlice(ctx context.Context, m driver.Conn, script *driver.Script, keys []string, args ...any) ([]any, error) {
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

// Refused reports whether master i's call in round returned a refusal,
// in the round or after it was decided.
func Refused(round *quorum.Round, i int) bool {
	agreed, err, ok := round.Returned(i)
	return ok && !agreed && err == nil
}

// RandUint32 returns 32 random bits from r (nil: the process's source).
func RandUint32(r *rand.Rand) uint32 {
	if r == nil {
		return rand.Uint32()
	}
	return r.Uint32()
}

// NewToken returns 128 random bits in hex from r (nil: crypto/rand): the
// token that marks a holder's keys.
func NewToken(r *rand.Rand) string {
	var b [16]byte
	if r == nil {
		_, _ = crand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	} else {
		binary.LittleEndian.PutUint64(b[:8], r.Uint64())
		binary.LittleEndian.PutUint64(b[8:], r.Uint64())
	}
	var h [32]byte
	hex.Encode(h[:], b[:])
	return string(h[:])
}
