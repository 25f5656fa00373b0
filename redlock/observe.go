package redlock

import (
	"context"
	"errors"
	"strconv"
	"time"

	"quorumlock.dev/quorum"
	"quorumlock.dev/redlock/internal/wait"
)

// Hooks are told of events an application may count, for metrics (redlockprom
// builds them). Each is optional: nil is off and costs nothing. They are called
// from the client's goroutines: they must be safe for concurrent use and return
// quickly. Only RenewalFailed is given a resource name, so that what a metrics
// adapter keeps per label does not grow with resources.
type Hooks struct {
	// Attempted: one acquisition attempt (a TryLock, one of a Lock's, a
	// LockAll, a call whose context had ended, or the handoff of a
	// release to a waiter of this client) ended after took with err (nil:
	// acquired); validity is what was left of the lease (0 unless acquired).
	Attempted func(took, validity time.Duration, err error)
	// Voted: master addr's answer to one attempt, after took, for every
	// master of every attempt (also late ones), but not a call that the
	// caller's context ended: that says nothing of the master.
	Voted func(addr string, vote Vote, took time.Duration)
	// Extended: an Extend, or one of a renewer's, ended with err (nil:
	// extended).
	Extended func(err error)
	// Waiting: a Lock call started waiting (+1), or returned after it had
	// (-1).
	Waiting func(delta int)
	// RenewalFailed: the renewer of [Lock.Renew] ended the lock on
	// resource; reason wraps ErrNoProgress, ErrMaxHold, Extend's error,
	// or ErrLockLost when the lease ran out before its turn.
	RenewalFailed func(resource string, reason error)
	// MasterQuarantined and MasterRestored: the restart guard or the clock
	// monitor stopped counting master addr's votes until about until (told
	// again when until moves), or counts them again.
	MasterQuarantined func(addr string, until time.Time)
	MasterRestored    func(addr string)
	// MasterDrift: the clock monitor's estimate of master addr's clock
	// rate relative to ours (1.0 = same), after each estimate;
	// MasterClockJumped: a jump it found between two samples.
	MasterDrift       func(addr string, rate float64)
	MasterClockJumped func(addr string, by time.Duration)
}

// Vote is how one master answered an acquisition attempt.
type Vote uint8

// The votes [Hooks].Voted is told of.
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
// told to the Voted hook; without one it is call itself.
func (c *Client) observeVotes(call quorum.Call) quorum.Call {
	voted := c.cfg.hooks.Voted
	if voted == nil {
		return call
	}
	return func(ctx context.Context, i int) (bool, error) {
		start := time.Now()
		agreed, err := call(ctx, i)
		took := time.Since(start)
		if !callerEnded(ctx, err) && !errors.Is(err, wait.ErrNotAsked) {
			voted(c.addrs[i], voteOf(agreed, err, took, c.cfg.nodeTimeout), took)
		}
		return agreed, err
	}
}
