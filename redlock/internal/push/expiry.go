package push

import (
	"math"
	"slices"
	"time"

	"quorumlock.dev/quorum"
)

// Holder is what scripts/holder.lua (or the fair lock script) said of a
// lock key on one master.
type Holder struct {
	OK    bool   // the master answered
	Token string // the key's value
	PTTL  int64  // ms; -2 no key, -1 no expiry
}

// HolderOf reads a script's reply of who holds a key, its token (nil: none)
// and PTTL in ms, as holder.lua gives them and probe.lua and fair_lock.lua
// give them too: OK is false when the PTTL is not an integer.
func HolderOf(token, pttl any) Holder {
	h := Holder{}
	h.Token, _ = token.(string)
	h.PTTL, h.OK = pttl.(int64)
	// Redis takes a PX up to ~9.2e12 ms; as a time.Duration that
	// overflows, and a wait computed from it came out negative: every
	// waiter retried at once until its context ended.
	h.PTTL = min(h.PTTL, MaxPTTL)
	return h
}

// MaxPTTL is the longest remaining TTL, in ms, that a waiter reads from a
// master: a year. A key set for longer is waited for as if it ends then (a
// release still wakes the waiters).
const MaxPTTL = int64(365 * 24 * time.Hour / time.Millisecond)

// WakeAfter is when a majority can next be won after round was lost: the
// need-th smallest time until a master is free (now, for one that took our
// key or whose key is gone; its key's TTL for one that refused; never, for
// one that failed, did not answer, or keeps a key without expiry). known is
// false when no majority will ever be free by expiry alone. holder is the
// token that holds a majority, whose release is worth waking for, or ""
// when none does (partial keys of other losers: any release may help).
func WakeAfter(round *quorum.Round, replies []Holder, need int) (free time.Duration, known bool, holder string) {
	n := round.Nodes()
	at := make([]int64, n)
	counts := make(map[string]int)
	for i := range n {
		r := replies[i]
		switch {
		case round.Answer(i) == quorum.Agreed:
			at[i] = 0
		case round.Answer(i) != quorum.Refused || !r.OK || r.PTTL == -1:
			at[i] = math.MaxInt64
		case r.PTTL == -2:
			at[i] = 0
		default:
			at[i] = max(r.PTTL, 0)
		}
		if r.OK && r.PTTL != -2 && r.Token != "" {
			counts[r.Token]++
		}
	}
	for tok, k := range counts {
		if k >= need {
			holder = tok
		}
	}
	slices.Sort(at)
	if at[need-1] > math.MaxInt64/int64(time.Millisecond) {
		// Never, or too far away to count in a time.Duration.
		return 0, false, holder
	}
	return time.Duration(at[need-1]) * time.Millisecond, true, holder
}
