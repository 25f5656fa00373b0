package redlock

import (
	"errors"
	"fmt"
)

// The errors a Client and a Lock return. Test for them with errors.Is: a
// returned error often joins one of these with per-master errors
// ([*MasterError]) and, when the context ended the call, ctx.Err().
var (
	// ErrNotAcquired: the lock was not won because other holders had it on
	// enough masters that a majority was out of reach.
	ErrNotAcquired = errors.New("redlock: not acquired")
	// ErrVotesSplit joins ErrNotAcquired when the lost attempt won some
	// masters but not a majority: the masters' votes were split between
	// callers that tried at once (its keys were released again). The
	// Attempt hook ([Hooks]) sees it on each such attempt.
	ErrVotesSplit = errors.New("redlock: votes split")
	// ErrQuorumUnavailable: so many masters failed or did not answer in time
	// (the node timeout, or the caller's context if it ended first) that a
	// majority was impossible, whoever held the lock; or the majority
	// answered too late for any validity to be left of the TTL.
	ErrQuorumUnavailable = errors.New("redlock: quorum unavailable")
	// ErrLockNotHeld: Unlock or Extend found our token on no majority of
	// masters, or the lock's validity had already run out, or it was
	// already released.
	ErrLockNotHeld = errors.New("redlock: lock not held")
	// ErrFenceUnavailable: the quorum was won but no fencing token could be
	// minted in time; the lock was released and not handed out.
	ErrFenceUnavailable = errors.New("redlock: fence unavailable")
	// ErrWrongType: the lock's key holds a value of another type (a hash, a
	// list) on so many masters that no majority can be won: something else
	// uses its name. It does not go away by itself, so Lock does not wait.
	ErrWrongType = errors.New("redlock: the lock's key holds another type")
	// ErrInvalidArgument: a bad option, master, resource or TTL.
	ErrInvalidArgument = errors.New("redlock: invalid argument")
	// ErrLockLost is the cause of a lock's context (see [Lock.Context]) when
	// the lock ended before Unlock: its validity ran out, an Extend failed,
	// the renewer of [Lock.Renew] ended it, or Unlock found it gone from the
	// masters. Another client may have held the lock since.
	ErrLockLost = errors.New("redlock: lock lost")
)

// The reasons the renewer of [Lock.Renew] gives when it ends a lock; the
// lock's context cause wraps them with [ErrLockLost].
var (
	// ErrNoProgress: the holder called [Lock.Progress] not once since the
	// last extension (or since Renew), so it is taken to be stuck.
	ErrNoProgress = errors.New("redlock: no progress since the last extension")
	// ErrMaxHold: one more extension would keep the lock past the maximum
	// hold time given to Renew.
	ErrMaxHold = errors.New("redlock: maximum hold time reached")
)

// MasterError is what one operation got on one master when it did not
// succeed there: a failure, or for a lost acquisition what the master gave
// it (refused, naming the holder by the start of its token; set, then
// released). A lost acquisition's error lists one per master it asked, in
// the masters' order, then its release's failures (Op "release").
type MasterError struct {
	Addr string // the master's address, or "master N" when it is not known
	Op   string // "acquire", "release" or "extend"
	Err  error
}

func (e *MasterError) Error() string {
	return fmt.Sprintf("redlock: %s on %s: %v", e.Op, e.Addr, e.Err)
}

func (e *MasterError) Unwrap() error { return e.Err }

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}
