package redlock

import (
	crand "crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"time"

	"quorumlock.dev/internal/seam"
)

// The simulator's way in (package internal/seam): a client's clocks and
// its randomness, for a world that replays a seed exactly or steps one
// client's clock. No public option sets them.
func init() {
	seam.ClientOption = func(clock seam.Clock, rnd seam.Rand) any {
		return Option(func(c *config) { c.seamClock, c.rnd = clock, rnd })
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

// randUint32 returns 32 random bits from r (nil: the process's source).
func randUint32(r *rand.Rand) uint32 {
	if r == nil {
		return rand.Uint32()
	}
	return r.Uint32()
}

// newToken returns 128 random bits in hex: crypto/rand's, or the
// simulator's from a stream of the call's own.
func (c *Client) newToken() string { return newToken(c.stream()) }

// newToken returns 128 random bits in hex from r (nil: crypto/rand).
func newToken(r *rand.Rand) string {
	var b [16]byte
	if r == nil {
		_, _ = crand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	} else {
		binary.LittleEndian.PutUint64(b[:8], r.Uint64())
		binary.LittleEndian.PutUint64(b[8:], r.Uint64())
	}
	var h [32]byte
	hex.Encode(h[:], b[:])
	return string(h[:])
}
