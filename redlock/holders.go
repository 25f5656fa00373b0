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
	keys := []string{key}
	replies, _ := readEach(c, ctx, func(ctx context.Context, i int) (push.Holder, bool, error) {
		if round.Answer(i) != quorum.Refused && !(late && wait.Refused(round, i)) {
			return push.Holder{}, false, nil
		}
		vals, err := call(c, ctx, i, func(ctx context.Context, m driver.Conn) ([]any, error) {
			return wait.EvalSlice(ctx, m, holderScript, keys)
		})
		if err != nil || len(vals) != 2 {
			return push.Holder{}, false, err
		}
		return push.HolderOf(vals[0], vals[1]), true, nil
	})
	return replies
}

// readEach runs read on every master, each bounded by the node timeout, and
// returns what each read (the zero T for a master whose read failed,
// returned false, or did not return in time) and the round. A read that
// returns after the round ended is dropped.
func readEach[T any](c *Client, ctx context.Context, read func(ctx context.Context, i int) (T, bool, error)) ([]T, *quorum.Round) {
	n := len(c.masters)
	var mu sync.Mutex // the calls that time out write after Do returned
	out := make([]T, n)
	over := false
	round := quorum.Group{Nodes: n, Timeout: c.cfg.nodeTimeout, Pool: c.group.Pool}.Do(ctx, func(ctx context.Context, i int) (bool, error) {
		v, ok, err := read(ctx, i)
		if ok && err == nil {
			mu.Lock()
			if !over {
				out[i] = v
			}
			mu.Unlock()
		}
		return err == nil, err
	})
	mu.Lock()
	over = true
	kept := slices.Clone(out)
	mu.Unlock()
	return kept, round
}
