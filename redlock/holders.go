package redlock

import (
	"context"
	"slices"
	"sync"

	"quorumlock.dev/driver"
	"quorumlock.dev/quorum"
	"quorumlock.dev/redlock/internal/push"
	"quorumlock.dev/redlock/internal/wait"
)

// readHolders runs the holder script on the masters that refused round
// (late: also those that refused after it was decided), each bounded by
// the node timeout; a master that did not answer in time has OK false.
func (c *Client) readHolders(ctx context.Context, round *quorum.Round, key string, late bool) []push.Holder {
	n := len(c.masters)
	var mu sync.Mutex // the calls that time out write after Do returned
	replies := make([]push.Holder, n)
	over := false
	keys := []string{key}
	quorum.Group{Nodes: n, Timeout: c.cfg.nodeTimeout}.Do(ctx, func(ctx context.Context, i int) (bool, error) {
		if round.Answer(i) != quorum.Refused && !(late && wait.Refused(round, i)) {
			return true, nil
		}
		vals, err := call(c, ctx, i, func(ctx context.Context, m driver.Conn) ([]any, error) {
			return wait.EvalSlice(ctx, m, holderScript, keys)
		})
		if err != nil || len(vals) != 2 {
			return false, err
		}
		r := push.HolderOf(vals[0], vals[1])
		mu.Lock()
		if !over {
			replies[i] = r
		}
		mu.Unlock()
		return true, nil
	})
	mu.Lock()
	over = true
	out := slices.Clone(replies)
	mu.Unlock()
	return out
}
