// Package fair is the lock's fair wait policy (redlock's WithFairness): a
// Lock call that lost its first attempt queues on the masters
// (scripts/fair_lock.lua) and is handed the lock in arrival order: by its
// client's Unlock in-process or in a handoff round (handoff.go), or by a
// release on the masters that hands the key to the queue's head. Line
// (line.go) is the in-process half: one client's queued waiters under one
// mutex. The policy, its Lua and its tests are this package; it reaches
// the lock's core only through Core and imports nothing of redlock.
// docs/design.md ("Fair handoff", "Handoff between clients") says why it
// is built this way.
package fair

import (
	"context"
	_ "embed"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/quorum"
	"quorumlock.dev/redlock/internal/wait"
)

// Core is what the policy asks of the lock's core, for locks of type L.
type Core[L Lock] interface {
	wait.Core[L]
	// Now reads the client's clocks: the monotonic one and the one that
	// counts suspend.
	Now() (time.Time, time.Duration)
	// Lease is what a TTL gives a holder, counted from its round's start.
	Lease(ttl time.Duration) time.Duration
	// Quarantined reports a master whose votes do not count (the
	// restart guard); Issued tells the guard of a TTL about to be set.
	Quarantined(i int) bool
	Issued(ttl time.Duration)
	// Attempted tells the Attempted hook, when there is one, of a lock
	// taken without an attempt of the call's own.
	Attempted(took, validity time.Duration)

	// Hold makes l a lock held over round's masters until until
	// (untilBoot on the clock that counts suspend), its keys set for ttl.
	Hold(l L, round *quorum.Round, until time.Time, untilBoot, ttl time.Duration)
	// Pass is a lock on l's keys, token, round and TTL, held until until.
	Pass(l L, until time.Time, untilBoot time.Duration) L
	// Keys are l's keys; Round the round that set them; TTL what they
	// were set for; Until the end of its lease (untilBoot on the clock
	// that counts suspend), as the core holds it.
	Keys(l L) []string
	Round(l L) *quorum.Round
	TTL(l L) time.Duration
	Until(l L) (time.Time, time.Duration)
	// Over reports whether a lease that ends at until (untilBoot) has run out.
	Over(until time.Time, untilBoot time.Duration) bool
	// Mint takes l's fence before deadline (nil without a fence).
	Mint(ctx context.Context, l L, deadline time.Time) error
	// Queued marks l's attempt a queued one: its refusals set nothing,
	// and on the masters that agreed a loss is undone by undo.
	Queued(l L, undo wait.Script)
	// Keep stores the policy's state of a held lock (Kept reads it) and
	// the script its release runs instead of release.lua (nil: that one).
	Keep(l L, kept any, release *wait.Script)
	Kept(l L) any
	// Abandon ends a lock nobody will hold and frees its keys in the
	// background, then calls after when it is not nil; AbandonRound frees
	// those of a lost attempt now.
	Abandon(ctx context.Context, l L, after func())
	AbandonRound(ctx context.Context, l L)

	// Do is a round over every master: the majority, the node timeout.
	Do(ctx context.Context, call quorum.Call) *quorum.Round
	// Vote is master i's vote in an acquisition whose call returned
	// agreed and err (a quarantined master's is not counted).
	Vote(i int, agreed bool, err error) (bool, error)
	// ReleaseOne runs l's release on master i: held, our token was there.
	ReleaseOne(ctx context.Context, l L, i int) (held bool, err error)
	// RetryRelease queues l's release on master i, to be tried again
	// after it got no reply; RetryScript any script on keys set for ttl.
	RetryRelease(l L, i int)
	RetryScript(i int, script *driver.Script, keys []string, args []any, ttl time.Duration, resource string)
	// Go runs f in the background; the client's Close waits for it, a node
	// timeout at most.
	Go(f func())
	// NeverSent reports an error that proves a call never reached master i.
	NeverSent(i int, err error) bool
	// MasterError is the error of op on master i, as the core reports it.
	MasterError(i int, op string, err error) error
}

// Lock is what the policy needs of the core's lock.
type Lock interface {
	comparable
	Token() string
	Resource() string
}

// Config is how New makes the policy.
type Config struct {
	Entry  time.Duration // the TTL of a waiter's queue entry
	Tag    string        // 8 hex digits in the ids of this client's queued waiters
	Wall   func() int64  // the wall clock of arrival stamps, µs since the Unix epoch
	Errors Errors
}

// Errors are the core's sentinels that the policy's errors wrap.
type Errors struct {
	NotAcquired, LockNotHeld, QuorumUnavailable, Quarantined error
}

// The Lua of the fair queue. QueueLua is a prelude, prepended to each
// script that touches a lock's wait queue, the core's release.lua too: the
// queue's names and what every release does are written there once.
var (
	//go:embed scripts/queue.lua
	QueueLua string

	//go:embed scripts/handoff.lua
	handoffLua    string
	HandoffScript = driver.NewScript(QueueLua + handoffLua)

	//go:embed scripts/fair_lock.lua
	lockLua    string
	LockScript = driver.NewScript(QueueLua + lockLua)

	//go:embed scripts/fair_undo.lua
	undoLua    string
	UndoScript = driver.NewScript(QueueLua + undoLua)

	//go:embed scripts/fair_leave.lua
	leaveLua    string
	LeaveScript = driver.NewScript(QueueLua + leaveLua)
)
