package redlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/quorum"
	"quorumlock.dev/redlock/internal/fair"
	"quorumlock.dev/redlock/internal/wait"
)

// What an operator asks in an incident: who holds this lock, for how long
// on each master, who waits, and, when its holder is gone, how to free it
// without touching a newer holder's keys (docs/operations.md, "Who holds
// a lock").

//go:embed scripts/inspect.lua
var inspectLua string

var inspectScript = driver.NewScript(fair.QueueLua + inspectLua)

// Inspection is what every master holds for one resource ([Client.Inspect]).
type Inspection struct {
	Resource string
	// Holder is the token held on a majority of masters, "" when none is:
	// nobody holds the lock, or the keys are split between attempts.
	Holder  string
	Masters []MasterKey
	// Fence is the fence counter's value for the resource ([WithFence]):
	// the last fence minted, or a value Seed raised it to. FenceKnown is
	// false without a fence, when the counter has none for the resource,
	// or when it cannot be read (FenceErr, or a counter that cannot say,
	// such as etcd's).
	Fence      uint64
	FenceKnown bool
	FenceErr   error
}

// fenceReader is a [Minter] that can read its counter without minting
// (fence.RedisCounter, pgfence.Counter).
type fenceReader interface {
	Last(ctx context.Context, resource string) (uint64, bool, error)
}

// MasterKey is what one master holds for a resource.
type MasterKey struct {
	Addr string
	// Token is the key's value: a holder's token, "q" (kept for the fair
	// queue's head by a release), or "" when there is no key.
	Token string
	// TTL is the key's remaining time; -1 when it has no expiry (never set
	// by the lock), 0 when there is no key.
	TTL time.Duration
	// WrongType is a key of another type under the lock's name: no lock can
	// be taken on the resource while a majority has one.
	WrongType bool
	// Queued is how many fair waiters queue there ([WithFairness]); Head is
	// the first one's id and HeadClaim the key a release hands it
	// ("<token> <ttl ms>", "" for none).
	Queued          int64
	Head, HeadClaim string
	// Err is why the master could not be read; the rest is then zero.
	Err error
}

// Inspect reads what every master holds for resource (its key's token and
// remaining TTL, a key of another type, the fair queue), each call bounded
// by the node timeout; it changes nothing. A master that could not be read
// has its Err set; the error is [ErrQuorumUnavailable] (joined with theirs)
// when a majority could not be, with the masters that could in the
// Inspection all the same. A bad resource is [ErrInvalidArgument].
func (c *Client) Inspect(ctx context.Context, resource string) (Inspection, error) {
	if err := c.check(resource, time.Minute); err != nil {
		return Inspection{}, err
	}
	if err := ctx.Err(); err != nil {
		return Inspection{}, err
	}
	out := Inspection{Resource: resource, Masters: make([]MasterKey, len(c.masters))}
	keys := []string{"lock:" + resource}
	var mu sync.Mutex // calls that time out write after Do returned: dropped
	over := false
	round := quorum.Group{Nodes: len(c.masters), Timeout: c.cfg.nodeTimeout}.Do(ctx, func(ctx context.Context, i int) (bool, error) {
		vals, err := call(c, ctx, i, func(ctx context.Context, m driver.Conn) ([]any, error) {
			return wait.EvalSlice(ctx, m, inspectScript, keys)
		})
		k, perr := masterKey(vals)
		if err == nil {
			err = perr
		}
		mu.Lock()
		if !over {
			out.Masters[i] = k
		}
		mu.Unlock()
		return err == nil, err
	})
	mu.Lock()
	over = true
	mu.Unlock()
	counts := map[string]int{}
	var errs []error
	for i := range out.Masters {
		k := &out.Masters[i]
		k.Addr = c.addrs[i]
		if _, err, ok := round.Returned(i); !ok || err != nil {
			if !ok {
				err = quorum.ErrTimeout
			}
			*k = MasterKey{Addr: c.addrs[i], Err: c.masterError(i, "inspect", err)}
			errs = append(errs, k.Err)
			continue
		}
		if k.Token != "" && k.Token != reservedToken {
			if counts[k.Token]++; counts[k.Token] >= c.quorum {
				out.Holder = k.Token
			}
		}
	}
	if r, ok := c.cfg.minter.(fenceReader); ok {
		fctx, cancel := context.WithTimeout(ctx, c.cfg.nodeTimeout)
		out.Fence, out.FenceKnown, out.FenceErr = r.Last(fctx, resource)
		cancel()
	}
	if len(errs) > len(c.masters)-c.quorum {
		return out, errors.Join(append([]error{ErrQuorumUnavailable}, errs...)...)
	}
	return out, nil
}

// reservedToken is the value of a key a release keeps for the fair queue's
// head (queue.lua): no holder's token.
const reservedToken = "q"

// masterKey reads inspect.lua's reply.
func masterKey(vals []any) (MasterKey, error) {
	if vals == nil {
		return MasterKey{}, nil
	}
	bad := fmt.Errorf("%w: %v from the inspect script", driver.ErrUnexpectedReply, vals)
	if len(vals) != 6 {
		return MasterKey{}, bad
	}
	kind, ok1 := vals[0].(string)
	value, ok2 := vals[1].(string)
	pttl, ok3 := vals[2].(int64)
	n, ok4 := vals[3].(int64)
	head, ok5 := vals[4].(string)
	claim, ok6 := vals[5].(string)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) {
		return MasterKey{}, bad
	}
	k := MasterKey{Token: value, WrongType: kind == "other", Queued: n, Head: head, HeadClaim: claim}
	switch {
	case pttl == -1:
		k.TTL = -1
	case pttl > 0:
		k.TTL = time.Duration(min(pttl, maxInspectTTL)) * time.Millisecond
	}
	return k, nil
}

// maxInspectTTL bounds a TTL read, in ms, so that it fits a Duration.
const maxInspectTTL = int64(1<<63-1) / int64(time.Millisecond)

// Release frees the lock on resource held by token, on every master:
// compare-and-delete, each call bounded by the node timeout, so that a key
// that holds another token (a newer holder's) is never touched; a fair
// queue's head is handed the key as by any release. It is the break-glass
// for a lock whose holder is gone (read its token with [Client.Inspect]),
// and returns how many masters held token. The holder, if alive, is not
// told: its Lock still reads as held until its lease ends, so release only
// a holder known to be gone (docs/operations.md). Errors:
// [ErrInvalidArgument] for a bad resource or an empty token or the
// reservation "q", [ErrQuorumUnavailable] when a majority could not be
// asked, joined with each master's error.
func (c *Client) Release(ctx context.Context, resource, token string) (int, error) {
	if err := c.check(resource, time.Minute); err != nil {
		return 0, err
	}
	if token == "" || token == reservedToken || strings.IndexFunc(token, func(r rune) bool { return r < 0x20 }) >= 0 {
		return 0, invalid("token %q is no holder's token", token)
	}
	keys, args := []string{"lock:" + resource}, []any{token}
	round := quorum.Group{Nodes: len(c.masters), Timeout: c.cfg.nodeTimeout}.Do(context.WithoutCancel(ctx), func(ctx context.Context, i int) (bool, error) {
		n, err := call(c, ctx, i, func(ctx context.Context, m driver.Conn) (int64, error) {
			return wait.EvalInt(ctx, m, releaseScript, keys, args...)
		})
		return n == 1, err
	})
	var errs []error
	for i := range c.masters {
		if _, err, ok := round.Returned(i); !ok || err != nil {
			if !ok {
				err = quorum.ErrTimeout
			}
			errs = append(errs, c.masterError(i, "release", err))
		}
	}
	released := round.Count(quorum.Agreed)
	if len(errs) > len(c.masters)-c.quorum {
		return released, errors.Join(append([]error{ErrQuorumUnavailable}, errs...)...)
	}
	return released, errors.Join(errs...)
}
