// Package seam is how the simulator (internal/harness/sim) reaches inside a
// redlock.Client without a public option: the clocks a client reads and the
// randomness it draws (tokens, queue ids, jitter). A world that gives every
// client a seeded source and delivers every message at a seeded time
// replays a seed exactly; a world that gives one client a clock of its own
// can step it or suspend it.
//
// Package redlock sets ClientOption when it is initialised; nothing outside
// this module can import this package, and a client built without the
// option reads the system's clocks and draws from crypto/rand and
// math/rand/v2, as ever.
package seam

import (
	"time"

	"quorumlock.dev/driver"
)

// Clock is a client's reading of its two clocks: the time (its monotonic
// reading is what leases are measured on) and the clock that counts
// suspend (package boottime's).
type Clock interface {
	Now() (time.Time, time.Duration)
}

// WallClock is a Clock that also reads the wall clock on its own: the
// clock of the fair queue's arrival stamps, which a step of the machine's
// clock moves while the monotonic clock goes on.
type WallClock interface {
	Clock
	Wall() time.Time
}

// Rand is a client's source of randomness; it must be safe for concurrent
// use. A token drawn from it is only as unguessable as the source: it is
// for simulations, never for a client that guards real data.
type Rand interface {
	Uint64() uint64
}

// ClientMasters returns what a redlock.Client (typed any here) was built
// on: its masters, in order, and its node timeout; nil and 0 for anything
// else. Package redlock sets it; package leadership reads it, so that an
// election publishes on exactly its client's masters with its client's
// timeout, and the two cannot drift apart.
var ClientMasters func(client any) ([]driver.Conn, time.Duration)

// ClientOption returns a redlock.Option (typed any here: this package
// cannot import redlock) that makes a client read clock and draw from rnd.
// Either may be nil: the client's own then.
var ClientOption func(clock Clock, rnd Rand) any
