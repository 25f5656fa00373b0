package redlock

import (
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"quorumlock.dev/redlock/internal/node"
	"quorumlock.dev/redlock/internal/wait"
)

// errStuck is the error of a master that a round did not call because the
// master has not replied for longer than the node timeout (see health).
var errStuck = errors.New("redlock: skipped: this master has not replied for longer than the node timeout")

// health is what the client knows of one master: its breaker (package
// node), and for errors and diagnoses the last call that got no reply and
// the diagnosing dial.
type health struct {
	node.Breaker
	// The last call that got no reply, for the errors of calls that then
	// time out (see masterError).
	lastFailure   atomic.Pointer[failure]
	lastDiagnosis atomic.Int64                  // when the last diagnosing dial started (see diagnose)
	diagnosis     atomic.Pointer[chan struct{}] // closed when the diagnosing dial in flight ends; nil: none
}

type failure struct {
	err     error
	at      int64 // ns on the client's clock
	refused bool  // err is a refused connection (ECONNREFUSED)
}

func newFailure(err error, at int64) *failure {
	return &failure{err: err, at: at, refused: errors.Is(err, syscall.ECONNREFUSED)}
}

// errRefused is the error of a call not made because the master's port
// refused a connection just before it (see Client.refusing).
var errRefused = errors.New("redlock: not called: the master refused a connection")

// neverSent reports an error that proves a command never reached master i:
// the breaker held it back, a handoff round left it to the plain release, or the connection could not be dialled by a
// client that does not retry (a client that retries may have written the
// command on an earlier try, and reports only the last one's error).
func (c *Client) neverSent(i int, err error) bool {
	if errors.Is(err, errStuck) || errors.Is(err, errRefused) || errors.Is(err, wait.ErrNotAsked) {
		return true
	}
	var op *net.OpError
	return c.noRetry[i] && errors.As(err, &op) && op.Op == "dial"
}

// clock is the time the client reads: the monotonic clock for every bound,
// and a clock that also counts time the machine spent suspended, which
// the monotonic clock on Linux does not, but the masters' key expiry does.
type clock interface {
	now() (time.Time, time.Duration)
}

func (c *Client) nanos() int64 { return int64(time.Since(c.epoch)) }

func masterLabel(i int, addr string) string {
	if addr == "" {
		return fmt.Sprintf("master %d", i)
	}
	return addr
}
