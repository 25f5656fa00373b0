package redlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/internal/names"
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
	if err := names.Resource(resource); err != nil {
		return Inspection{}, invalid("%v", err)
	}
	if err := ctx.Err(); err != nil {
		return Inspection{}, err
	}
	keys := []string{"lock:" + resource}
	masters, round := readEach(c, ctx, func(ctx context.Context, i int) (MasterKey, bool, error) {
		vals, err := call(c, ctx, i, func(ctx context.Context, m driver.Conn) ([]any, error) {
			return wait.EvalSlice(ctx, m, inspectScript, keys)
		})
		if err != nil {
			return MasterKey{}, false, err
		}
		k, err := masterKey(vals)
		return k, err == nil, err
	})
	out := Inspection{Resource: resource, Masters: masters}
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
// and returns how many masters held token. It is the lock's own release:
// one that gets no reply is tried again in the background, as Unlock's is. The holder, if alive, is not
// told: its Lock still reads as held until its lease ends, so release only
// a holder known to be gone (docs/operations.md). Errors:
// [ErrInvalidArgument] for a bad resource or an empty token or the
// reservation "q", [ErrQuorumUnavailable] when a majority could not be
// asked, joined with each master's error.
func (c *Client) Release(ctx context.Context, resource, token string) (int, error) {
	if err := names.Resource(resource); err != nil {
		return 0, invalid("%v", err)
	}
	if token == "" || token == reservedToken || strings.IndexFunc(token, func(r rune) bool { return r < 0x20 }) >= 0 {
		return 0, invalid("token %q is no holder's token", token)
	}
	// The lock's own release, as if the gone holder unlocked: every master,
	// a release that gets no reply tried again in the background.
	l := newLock(c, resource, token)
	everywhere := make([]bool, len(c.masters))
	for i := range everywhere {
		everywhere[i] = true
	}
	released := l.releaseAll(ctx, quorum.Settled(everywhere), nil)
	held, failed := 0, 0
	for i := range released {
		switch released[i].state.Load() {
		case releasedHeld:
			held++
		case releasedNotOurs:
		default:
			failed++
		}
	}
	switch {
	case failed > len(c.masters)-c.quorum:
		return held, l.releaseError(ErrQuorumUnavailable, released)
	case failed > 0:
		return held, l.releaseError(nil, released) // each master that failed
	}
	return held, nil
}

// ForceRelease is the break-glass for keys whose owners are gone and that
// no one token holds on a majority, such as the leftovers of attempts that
// split the masters: on each master it releases the key that seen, an
// earlier [Client.Inspect] of the same masters, found there, with the
// lock's own compare-and-delete, so a key whose value changed since (a
// newer holder's) is never touched. A key of another type is left alone
// (delete it by hand). It returns how many masters still held what seen
// found. Errors: [ErrInvalidArgument] for an inspection of other masters
// or a bad resource, [ErrQuorumUnavailable] when a majority could not be
// asked, each master's error joined.
func (c *Client) ForceRelease(ctx context.Context, seen Inspection) (int, error) {
	if err := names.Resource(seen.Resource); err != nil {
		return 0, invalid("%v", err)
	}
	if len(seen.Masters) != len(c.masters) {
		return 0, invalid("the inspection has %d masters, this client %d", len(seen.Masters), len(c.masters))
	}
	for i, m := range seen.Masters {
		if m.Addr != c.addrs[i] {
			return 0, invalid("the inspection's master %d is %q, this client's %q", i, m.Addr, c.addrs[i])
		}
	}
	out := make([]release, len(c.masters))
	for i := range out {
		out[i].state.Store(releasedNotOurs) // until a release says otherwise
	}
	done := make([]bool, len(c.masters))
	for i, m := range seen.Masters {
		if done[i] || m.Token == "" || m.WrongType || m.Err != nil {
			continue
		}
		// One release per value seen, on the masters that held it.
		held := make([]bool, len(c.masters))
		for j, o := range seen.Masters {
			if !done[j] && o.Token == m.Token && !o.WrongType && o.Err == nil {
				held[j], done[j] = true, true
			}
		}
		l := newLock(c, seen.Resource, m.Token)
		l.refusedClean = true // the others are not this value's
		released := l.releaseAll(ctx, quorum.Settled(held), nil)
		for j := range held {
			if held[j] {
				out[j].e = released[j].e
				out[j].state.Store(released[j].state.Load())
			}
		}
	}
	n, failed := 0, 0
	for i := range out {
		switch out[i].state.Load() {
		case releasedHeld:
			n++
		case releaseFailed:
			failed++
		}
	}
	l := newLock(c, seen.Resource, "")
	switch {
	case failed > len(c.masters)-c.quorum:
		return n, l.releaseError(ErrQuorumUnavailable, out)
	case failed > 0:
		return n, l.releaseError(nil, out)
	}
	return n, nil
}
