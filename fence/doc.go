// Package fence mints fencing tokens and makes storage check them: the
// correctness half of quorumlock, beside the efficiency lock of package
// redlock. A token is an integer that strictly increases for a resource,
// taken from one authoritative counter after a lock is won. The storage that
// the lock protects keeps the newest token it has accepted and refuses
// writes that carry an older one, which is what makes a write safe when a
// lock holder was paused past its lease.
//
// Counters ([Minter]): [RedisCounter] mints on the key fence:<resource> of
// one dedicated Redis node, not one of the lock's masters. It increments the
// key, and starts a missing one (a new resource, or a key the node lost)
// from the node's clock in microseconds, so that no fence is handed out
// twice, by any process, across a loss, while that clock does not go back
// ([RedisCounter.Mint]). [RedisCounter.CheckDurability] checks that the node
// keeps what it acknowledged.
//
// Guards: [RedisGuard] stores a value in Redis only when its fence is not
// older than the one stored with it. A refused write returns
// [ErrFenceRejected] and is counted in [Rejected]. Zero rows changed is never
// success. docs/fencing.md explains the model, the claim-then-write pattern
// and the <= versus < choice ([AtLeast], [Newer]).
//
// The PostgreSQL counter and guard are in package pgfence, so that a program
// that does not import it does not link pgx.
//
// A counter is bound to its node when it is made: it is one authoritative
// service. A guard takes the client or transaction per call: the fenced
// write must run on whatever the caller writes with, its transaction too.
//
// The package does not take locks; see the redlock package.
package fence

import (
	"context"
)

// Minter mints fencing tokens. Mint returns a value strictly greater than
// every value it returned before for the same resource. It must honour ctx's
// deadline, since the lock it serves expires at that deadline.
type Minter interface {
	Mint(ctx context.Context, resource string) (uint64, error)
}

// Key is the counter key of resource: "fence:" + resource, the twin of the
// lock key "lock:" + resource.
func Key(resource string) string { return "fence:" + resource }
