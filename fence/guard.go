package fence

import (
	"errors"
	"sync/atomic"
)

// ErrFenceRejected reports a write that the storage refused because it has
// already accepted a write with a newer fence: the writer's lock is stale.
// The write was not applied. Treat it as the lock lost, never as success.
var ErrFenceRejected = errors.New("fence: rejected: the storage has seen a newer fence")

// Comparison says which fences a guard admits against the one stored.
type Comparison int

const (
	// AtLeast admits a fence equal to or newer than the stored one (stored
	// <= fence): the holder of a lease can write several times, and any
	// older holder is refused. The default.
	AtLeast Comparison = iota
	// Newer admits only a fence newer than the stored one (stored < fence):
	// one write per lease, as in the classic "fence < $fence" SQL. A holder
	// that retries its own write is refused too.
	Newer
)

var rejected atomic.Uint64

// Rejected is the number of writes refused by any guard of this package in
// this process since it started: the counter exported to Prometheus as
// lock_fence_rejected_total. A steady rate above zero means leases expire
// under their holders (TTL too short for the work, or pauses).
func Rejected() uint64 { return rejected.Load() }

// reject counts one refused write and returns ErrFenceRejected.
func reject() error {
	rejected.Add(1)
	return ErrFenceRejected
}
