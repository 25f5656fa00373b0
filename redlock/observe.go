package redlock

import (
	"context"
	"errors"
	"strconv"
	"time"

	"quorumlock.dev/internal/quorum"
)

// Observer is told of events that an application may count, such as
// metrics. Its methods are called from the client's goroutines: they must
// be safe for concurrent use and return quickly. An Observer may also
// implement [LockObserver], [QuarantineObserver] and the clock monitor's
// DriftObserver; the client looks for them once, in [New].
type Observer interface {
	// RenewalFailed: the renewer could not extend the lock on resource and
	// ended it; reason wraps ErrNoProgress, ErrMaxHold, Extend's error, or
	// ErrLockLost when the lease ran out before the renewer's turn.
	RenewalFailed(resource string, reason error)
}

type nopObserver struct{}

func (nopObserver) RenewalFailed(string, error) {}

// LockObserver is an [Observer] that also hears of acquisitions,
// extensions and waits. It is a separate interface so that existing
// Observers keep compiling. None of its methods is given a resource name,
// so that what an observer keeps per label does not grow with them.
type LockObserver interface {
	// Attempted: one acquisition attempt (a TryLock, one of a Lock's
	// attempts, a LockAll, or the handoff round of a release that handed
	// the lock to a waiter of this client, see [WithFairness]) ended after took, with err, the error its caller
	// got (nil: acquired), and validity, what was left of the lease when
	// the lock was handed out (0 unless acquired).
	Attempted(took, validity time.Duration, err error)
	// Voted: master addr's answer to one attempt, after took (VoteSkipped:
	// it was not called). It is told of every master of every attempt,
	// also of those that answered after the attempt had decided, but for
	// a call that the caller's context ended: that says nothing of the
	// master.
	Voted(addr string, vote Vote, took time.Duration)
	// Extended: an Extend, or one of a renewer's, ended with err (nil:
	// extended).
	Extended(err error)
	// Waiting: a Lock call started waiting (delta +1), after a failed
	// attempt or, with [WithFairness], behind a waiter of its own client
	// before its first; or it returned after it had (-1).
	Waiting(delta int)
}

// Vote is how one master answered an acquisition attempt.
type Vote uint8

// The votes a [LockObserver] is told of.
const (
	VoteAgreed      Vote = iota // the key is ours there
	VoteRefused                 // another holder's key is there
	VoteFailed                  // an error, or no reply
	VoteTimeout                 // no answer within the node timeout, whatever came later
	VoteQuarantined             // the key is set but the vote is not counted (see [WithRestartGuard])
	VoteSkipped                 // not called: the master has not replied for longer than 4 node timeouts
)

var voteNames = [...]string{"agreed", "refused", "failed", "timeout", "quarantined", "skipped"}

func (v Vote) String() string {
	if int(v) >= len(voteNames) {
		return "vote(" + strconv.Itoa(int(v)) + ")"
	}
	return voteNames[v]
}

// voteOf classifies the outcome of one master's call of an attempt.
func voteOf(agreed bool, err error, took, timeout time.Duration) Vote {
	switch {
	case errors.Is(err, errStuck):
		return VoteSkipped
	case took >= timeout || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, quorum.ErrTimeout):
		return VoteTimeout
	case errors.Is(err, errQuarantined):
		return VoteQuarantined
	case err != nil:
		return VoteFailed
	case agreed:
		return VoteAgreed
	}
	return VoteRefused
}

// observeVotes wraps an attempt's call so that each master's answer is
// told to the LockObserver; without one it is call itself.
func (c *Client) observeVotes(call quorum.Call) quorum.Call {
	obs := c.cfg.lockObs
	if obs == nil {
		return call
	}
	return func(ctx context.Context, i int) (bool, error) {
		start := time.Now()
		agreed, err := call(ctx, i)
		took := time.Since(start)
		if !callerEnded(ctx, err) {
			obs.Voted(c.addrs[i], voteOf(agreed, err, took, c.cfg.nodeTimeout), took)
		}
		return agreed, err
	}
}
