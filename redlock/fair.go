package redlock

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"quorumlock.dev/driver"

	"quorumlock.dev/internal/quorum"
)

// Fair handoff ([WithFairness]): a Lock call that lost its first attempt
// becomes a queued waiter. It takes an arrival stamp (the client's wall
// clock in µs and a random tiebreak, one value for every master) and from
// then on attempts with scripts/fair_lock.lua, which enqueues it on each
// master and sets the key only for the head of the queue. A release hands
// the key to the queue (scripts/release.lua) instead of deleting it, so a
// releaser that locks again at once queues behind those already waiting.
// The stamp only orders waiters: mutual exclusion still comes from the key
// set on a majority. docs/design.md ("Fair handoff") says why it is built
// this way.

var (
	//go:embed scripts/fair_lock.lua
	fairLockLua    string
	fairLockScript = driver.NewScript(fairLockLua)

	//go:embed scripts/fair_leave.lua
	fairLeaveLua    string
	fairLeaveScript = driver.NewScript(fairLeaveLua)
)

// reserved is the lock key's value while release.lua hands it to the
// queue's head; no token equals it.
const reserved = "q"

// queued is one Lock call that waits in the masters' queues.
type queued struct {
	id     string   // the stamp, the client's tag and a tiebreak in fixed-width hex: sorts like (stamp, tag, tiebreak)
	at     int64    // the arrival stamp, µs since the Unix epoch: the entry's score
	keys   []string // lock key, queue, entry deadlines
	ttlMS  int64    // the entry's TTL
	pushed bool     // a release on a majority reaches us
	last   *fairReplies

	lockTTL time.Duration // the TTL of the lock it waits for, for a direct handoff
	grantable
}

// fairReplies is what fair_lock.lua said on each master in one attempt.
// Calls that outlive their round write after it was read: they are dropped.
type fairReplies struct {
	mu   sync.Mutex
	r    []holderReply
	over bool
}

func (f *fairReplies) set(i int, r holderReply) {
	f.mu.Lock()
	if !f.over {
		f.r[i] = r
	}
	f.mu.Unlock()
}

func (f *fairReplies) snapshot() []holderReply {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.over = true
	return slices.Clone(f.r)
}

// queueKeys names the queue of lock key key and its entries' deadlines,
// in key's Redis Cluster hash slot so that one script may touch all three
// on a cluster master: a hash tag of the resource is kept, otherwise the
// whole key becomes the tag. A key without a tag that has a '}' cannot be
// made a tag: ok is false and that resource is waited for unfairly.
// scripts/release.lua derives the same names.
func queueKeys(key string) (q, e string, ok bool) {
	r := strings.TrimPrefix(key, "lock:")
	if o := strings.IndexByte(r, '{'); o >= 0 {
		if n := strings.IndexByte(r[o+1:], '}'); n > 0 {
			return "lockq:" + r, "lockt:" + r, true
		}
	}
	if strings.IndexByte(r, '}') >= 0 {
		return "", "", false
	}
	return "lockqu:{" + key + "}", "locktu:{" + key + "}", true
}

// enqueue makes the queued state of a Lock call on key for ttl, woken by
// w, or nil when key cannot have a queue.
func (c *Client) enqueue(key string, ttl time.Duration, w *waiter) *queued {
	q, e, ok := queueKeys(key)
	if !ok {
		return nil
	}
	now := time.Now().UnixMicro()
	return &queued{
		id:      fmt.Sprintf("%014x%s%08x", now, c.tag, rand.Uint32()),
		at:      now,
		keys:    []string{key, q, e},
		ttlMS:   c.cfg.fairTTL.Milliseconds(),
		lockTTL: ttl.Truncate(time.Millisecond),
		grantable: grantable{
			grant: make(chan *Lock, 1),
			wake:  w.wake,
		},
	}
}

// fairCall is one queued attempt on master i, m: true when the key is ours.
func (c *Client) fairCall(ctx context.Context, m driver.Conn, i int, q *queued, rep *fairReplies, token string, ttlMS int64) (bool, error) {
	vals, err := evalSlice(ctx, m, fairLockScript, q.keys, token, ttlMS, q.id, q.at, q.ttlMS, c.tag)
	if err != nil {
		return false, err
	}
	if len(vals) == 1 && vals[0] == int64(1) {
		return true, nil
	}
	if len(vals) != 4 {
		return false, fmt.Errorf("redlock: fair lock script replied %v", vals)
	}
	r := holderReply{}
	r.token, _ = vals[1].(string)
	r.pttl, r.ok = vals[2].(int64)
	if r.foreign, err = foreignStamp(vals[3]); err != nil {
		return false, err
	}
	rep.set(i, r)
	return false, nil
}

// foreignStamp reads fair_lock.lua's fourth reply: the arrival stamp of the
// first waiter of another client queued, in hex µs, or "" for none
// (math.MaxInt64).
func foreignStamp(v any) (int64, error) {
	s, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("redlock: fair lock script replied %v for the first foreign waiter", v)
	}
	if s == "" {
		return math.MaxInt64, nil
	}
	n, err := strconv.ParseInt(s, 16, 64)
	if err != nil {
		// An entry that is none of ours (written by hand, another
		// library): no waiter of ours is known to be ahead of it.
		return 0, nil
	}
	return n, nil
}

// readyQueued prepares w for a queued attempt: any release from now on
// wakes it; it reports whether a release on a majority reaches it.
func (c *Client) readyQueued(ctx context.Context, w *waiter) bool {
	select {
	case <-w.wake:
	default:
	}
	w.setHolder("")
	w.expect(0)
	w.expect(c.quorum) // until planQueued knows better
	return w.listening(ctx, c.quorum, c.cfg.nodeTimeout)
}

// planQueued is plan for a queued waiter, from the replies of its attempt:
// it sleeps until the key may be free for it, a release that names it the
// head wakes it, and it wakes in time to refresh its entry.
func (c *Client) planQueued(w *waiter, round *quorum.Round, q *queued, poll time.Duration) time.Duration {
	replies := q.last.snapshot()
	c.observe(q, replies)
	free, known, holder := wakeAfter(round, replies, c.quorum)
	w.setHolder(holder)
	// The masters held by a token must publish its release; a majority is
	// free once all but n-quorum of them did.
	held := 0
	for _, r := range replies {
		if r.ok && r.token != "" && r.token != reserved {
			held++
		}
	}
	w.expect(max(held-(len(c.masters)-c.quorum), 1))
	refresh := c.cfg.fairTTL / 3
	if !known {
		return min(poll, refresh)
	}
	free += rand.N(wakeJitter)
	if !q.pushed {
		free = min(free, poll)
	}
	return min(free, refresh)
}

// dequeue removes q's entry in the background, each master bounded by the
// node timeout, on every master but those whose call in won (the winning
// round, whose script removed it; nil when q gave up) returned agreed. An entry that a
// late call adds again expires.
func (c *Client) dequeue(ctx context.Context, q *queued, won *quorum.Round) {
	if won != nil && won.Count(quorum.Agreed) == len(c.masters) {
		return
	}
	c.leave(ctx, q.keys, []any{q.id}, func(i int) bool {
		if won == nil {
			return false
		}
		// Calls that won after their round ended removed the entry too.
		agreed, _, ok := won.Returned(i)
		return ok && agreed
	})
}

// leave removes the queue entries ids of keys (the lock key, its queue and
// deadlines, scripts/fair_leave.lua) in the background, on every master
// but those skip names, each bounded by the node timeout. An entry that a
// master misses, or that a late call adds again, expires.
func (c *Client) leave(ctx context.Context, keys []string, ids []any, skip func(int) bool) {
	ctx = context.WithoutCancel(ctx)
	go quorum.Group{Nodes: len(c.masters), Timeout: c.cfg.nodeTimeout}.Do(ctx, func(ctx context.Context, i int) (bool, error) {
		if skip != nil && skip(i) {
			return true, nil
		}
		_, err := call(c, ctx, i, func(ctx context.Context, m driver.Conn) (any, error) {
			return m.Eval(ctx, fairLeaveScript, keys, ids...)
		})
		if err != nil && err != errStuck { // a master the breaker skipped was not asked
			c.cfg.logger.Debug("redlock: leaving the wait queue failed; the entry is left to expire", "master", c.addrs[i], "err", err)
		}
		return err == nil, err
	})
}
