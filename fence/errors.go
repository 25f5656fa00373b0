package fence

import (
	"errors"

	"quorumlock.dev/fence/internal/rejection"
)

// The errors of this package's counters and guards; test for them with
// errors.Is.
var (
	// ErrInvalidArgument reports a bad resource name or option.
	ErrInvalidArgument = errors.New("fence: invalid argument")
	// ErrCounter reports a counter that holds a value that is no fencing
	// token: not an integer, or not above zero. It is left as it was.
	ErrCounter = errors.New("fence: counter returned an invalid value")
	// ErrNotDurable reports a counter node that may lose acknowledged
	// mints, or whose settings could not be read to rule that out. A lost
	// counter restarts from the node's clock (see [RedisCounter.Mint]), which
	// is safe only while that clock does not go back.
	ErrNotDurable = errors.New("fence: counter node may lose fences")
	// ErrCounterRegressed reports a counter that answered with a value no
	// larger than one this process had already minted for the resource: the
	// key came back older (its node's clock went back across a loss, a
	// failover to a lagging replica, a hand-written value). No fence is
	// returned, and this counter mints none for the resource until
	// [RedisCounter.Seed] raises it.
	ErrCounterRegressed = errors.New("fence: counter went backwards")
	// ErrFenceRejected reports a write that the storage refused because it has
	// already accepted a write with a newer fence: the writer's lock is stale.
	// The write was not applied. Treat it as the lock lost, never as success.
	ErrFenceRejected = rejection.ErrRejected
)
