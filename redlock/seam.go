package redlock

import (
	"math/rand/v2"
	"slices"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/internal/seam"
	"quorumlock.dev/redlock/internal/wait"
)

// The simulator's way in (package internal/seam): a client's clocks and
// its randomness, for a world that replays a seed exactly or steps one
// client's clock. No public option sets them.
func init() {
	seam.ClientOption = func(clock seam.Clock, rnd seam.Rand) any {
		return Option(func(c *config) { c.seamClock, c.rnd = clock, rnd })
	}
	seam.ClientMasters = func(client any) ([]driver.Conn, time.Duration) {
		c, ok := client.(*Client)
		if !ok || c == nil {
			return nil, 0
		}
		return slices.Clone(c.masters), c.cfg.nodeTimeout
	}
}

// seamClock is a clock the simulator gave the client.
type seamClock struct{ c seam.Clock }

func (s seamClock) now() (time.Time, time.Duration) { return s.c.Now() }

// stream returns a random stream of a call's own: nil (draw from the
// process's sources) unless the simulator gave the client a source. Its
// goroutines that wake at one virtual instant draw from the client's
// source in an order the scheduler picks; a call that draws from its own
// stream, seeded when it began, draws the same whatever that order.
func (c *Client) stream() *rand.Rand {
	if c.cfg.rnd == nil {
		return nil
	}
	return rand.New(rand.NewPCG(c.cfg.rnd.Uint64(), c.cfg.rnd.Uint64()))
}

// wallMicros is the system's wall clock in µs since the Unix epoch: the
// clock of the fair queue's arrival stamps, the one clock the client reads
// that a step of the machine's clock moves (leases and timeouts are on the
// monotonic clock and the one that counts suspend).
func wallMicros() int64 { return time.Now().UnixMicro() }

// newToken returns 128 random bits in hex: crypto/rand's, or the
// simulator's from a stream of the call's own.
func (c *Client) newToken() string { return wait.NewToken(c.stream()) }
