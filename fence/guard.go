package fence

import "quorumlock.dev/fence/internal/rejection"

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

// Rejected is the number of writes refused by any guard of this package or
// its subpackages in this process since it started. A steady rate above zero
// means leases expire under their holders (TTL too short for the work, or
// pauses).
func Rejected() uint64 { return rejection.Count() }

// reject counts one refused write, tells hook (when not nil) and returns
// ErrFenceRejected.
func reject(hook func()) error { return rejection.Reject(hook) }
