package redlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/redlock/check"
)

// Check reads the settings of each master and of the fence counter's node
// (when the minter names one, fence.RedisCounter) under which a lock can be
// granted twice or a fence repeated, all nodes at once, each call bounded
// by the node timeout; see [check.Nodes]. The error is only ctx's. See
// docs/operations.md, "Checking masters".
func (c *Client) Check(ctx context.Context) (check.Report, error) {
	var fence driver.Conn
	if on, ok := c.cfg.minter.(nodeMinter); ok {
		fence = on.Node()
	}
	return check.Nodes(ctx, c.cfg.nodeTimeout, c.masters, fence)
}

// strictGate is the state of [WithStrictCheck]: the outcome of the last
// check, kept for good once every node answered.
type strictGate struct {
	mu   sync.Mutex
	done bool      // a complete check ran: err is final
	err  error     // that check's Report.Err
	last time.Time // when an incomplete check last ran
}

// strictRecheck is how often an incomplete check (a node that did not
// answer) is run again by the acquisitions that follow.
const strictRecheck = time.Second

// admit is nil when the client may acquire: always without
// [WithStrictCheck]; with it, once a check found no [check.Problem]. The
// first call runs the check; later ones read its kept outcome, except that
// a check some node did not answer is run again, at most once per second.
func (c *Client) admit(ctx context.Context) error {
	g := c.cfg.gate
	if !c.cfg.strict {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done || (!g.last.IsZero() && time.Since(g.last) < strictRecheck) {
		return g.err
	}
	rep, err := c.Check(ctx)
	if err != nil { // the caller's context ended: nothing was attempted
		return fmt.Errorf("redlock: not attempted: the strict check did not finish: %w", err)
	}
	g.err, g.last, g.done = rep.Err(), time.Now(), complete(rep)
	return g.err
}

// complete reports whether every node answered INFO: no role is unknown.
func complete(rep check.Report) bool {
	nodes := rep.Masters
	if rep.Fence != nil {
		nodes = append(nodes[:len(nodes):len(nodes)], *rep.Fence)
	}
	for _, n := range nodes {
		for _, f := range n.Findings {
			if f.Setting == "role" && f.Status == check.Unknown {
				return false
			}
		}
	}
	return true
}
