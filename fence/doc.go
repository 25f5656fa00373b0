// Package fence mints fencing tokens: integers that strictly increase for a
// resource, taken from one authoritative counter after a lock is won. The
// storage that a lock protects compares the token of each write with the
// newest it has seen and rejects older ones, which is what makes a write safe
// when a lock holder was paused past its lease.
//
// A [Minter] is the counter. [RedisCounter] keeps it as INCR fence:<resource>
// on one dedicated Redis node, which must not be one of the lock's masters
// and must not lose writes (appendonly with appendfsync always, and the
// noeviction policy): a counter that restarts empty hands out small tokens
// again, and storage would then reject every honest writer.
//
// The package does not take locks; see the redlock package.
package fence

import (
	"context"
	"errors"
)

// Minter mints fencing tokens. Mint returns a value strictly greater than
// every value it returned before for the same resource. It must honour ctx's
// deadline, since the lock it serves expires at that deadline.
type Minter interface {
	Mint(ctx context.Context, resource string) (uint64, error)
}

// Errors returned by this package's counters.
var (
	// ErrInvalidArgument reports a bad resource name or option.
	ErrInvalidArgument = errors.New("fence: invalid argument")
	// ErrCounter reports a counter that answered with a value that is no
	// fencing token: not an integer, or not above zero.
	ErrCounter = errors.New("fence: counter returned an invalid value")
)

// Key is the counter key of resource: "fence:" + resource, the twin of the
// lock key "lock:" + resource.
func Key(resource string) string { return "fence:" + resource }
