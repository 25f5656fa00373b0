package redlock

import (
	"context"
	"slices"
	"sync"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/quorum"
	"quorumlock.dev/redlock/internal/push"
)

// holderOf reads a script's reply of who holds a key, its token (nil: none)
// and PTTL in ms, as holder.lua gives them and probe.lua and fair_lock.lua
// give them too: OK is false when the PTTL is not an integer.
func holderOf(token, pttl any) push.Holder {
	h := push.Holder{}
	h.Token, _ = token.(string)
	h.PTTL, h.OK = pttl.(int64)
	// Redis takes a PX up to ~9.2e12 ms; as a time.Duration that
	// overflows, and a wait computed from it came out negative: every
	// waiter retried at once until its context ended.
	h.PTTL = min(h.PTTL, maxPTTL)
	return h
}

// maxPTTL is the longest remaining TTL, in ms, that a waiter reads from a
// master: a year. A key set for longer is waited for as if it ends then (a
// release still wakes the waiters).
const maxPTTL = int64(365 * 24 * time.Hour / time.Millisecond)

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
		if round.Answer(i) != quorum.Refused && !(late && refused(round, i)) {
			return true, nil
		}
		vals, err := call(c, ctx, i, func(ctx context.Context, m driver.Conn) ([]any, error) {
			return evalSlice(ctx, m, holderScript, keys)
		})
		if err != nil || len(vals) != 2 {
			return false, err
		}
		r := holderOf(vals[0], vals[1])
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
