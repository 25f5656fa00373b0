package model

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// The fair policy's rules (fair.pml), generalised to any number of masters,
// waiters and attempts: each master has a wait queue of entries ordered by
// their arrival stamps; a fair waiter's attempt (fair_lock.lua) takes a key
// that is free for it as the queue's head, or one handed to an earlier
// attempt of its own, and otherwise queues its entry, with a claim on its
// token; a release hands the key to the head (queue.lua's hand_to_head: to
// its claim's token; handoff.lua: a new token for the releasing client's own
// waiter), only the key's holder's own release hands it on, and a waiter
// that took a lock passed in-process no longer waits, so no claim of its
// takes a key afterwards; a lock is passed in-process only by a holder of
// its own client whose lock has not ended.

// entry is a fair waiter's entry in one master's queue: alive for sure
// before soft, gone for sure from hard.
type entry struct {
	stamp      uint64
	claim      string // the token a release hands the waiter, "" for none
	soft, hard time.Duration
}

type fairState struct {
	entries  []map[string]*entry // by master, by waiter
	waiterOf map[string]string   // a fair attempt's token: its waiter
	passedIn map[string]bool     // waiters that took a lock passed in-process
}

func newFairState(masters int) fairState {
	f := fairState{entries: make([]map[string]*entry, masters), waiterOf: make(map[string]string), passedIn: make(map[string]bool)}
	for m := range f.entries {
		f.entries[m] = make(map[string]*entry)
	}
	return f
}

// queued puts w's entry in master m's queue, or refreshes it (its stamp
// stays: a waiter's attempts all send the stamp of its arrival).
func (c *Checker) queued(m int, w string, stamp uint64, claim string) {
	soft, hard := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
	if c.cfg.EntryTTL > 0 {
		soft, hard = c.now+c.cfg.EntryTTL-c.cfg.EntryDrift, c.now+c.cfg.EntryTTL+c.cfg.EntryDrift
	}
	if old := c.fair.entries[m][w]; old != nil && c.now < old.hard {
		stamp = old.stamp
	}
	c.fair.entries[m][w] = &entry{stamp: stamp, claim: claim, soft: soft, hard: hard}
}

// ahead is a waiter other than w whose entry on master m is queued before
// stamp and alive for sure ("" for none): w cannot be the head.
func (c *Checker) ahead(m int, w string, stamp uint64) string {
	var ids []string
	for id, x := range c.fair.entries[m] {
		if id != w && x.stamp < stamp && c.now < x.soft {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	if len(ids) == 0 {
		return ""
	}
	return ids[0]
}

// mayBeAhead reports whether a waiter other than w may still be queued
// before stamp on master m.
func (c *Checker) mayBeAhead(m int, w string, stamp uint64) bool {
	for id, x := range c.fair.entries[m] {
		if id != w && x.stamp < stamp && c.now < x.hard {
			return true
		}
	}
	return false
}

// fairSet is a fair waiter's attempt on one master (fair_lock.lua): "" when
// the model can take it, else the rule it breaks.
func (c *Checker) fairSet(e Event, l *lock) string {
	m, w := e.Master, e.Waiter
	k := &c.keys[m]
	gone := k.token == "" || c.now >= k.hard
	mine := !gone && k.token != e.Token && k.token != "q" && c.fair.waiterOf[k.token] == w // handed to an earlier attempt of w's
	held := !gone && c.now < k.soft && k.token != "q" && !mine                             // another's key, for sure
	c.fair.waiterOf[e.Token] = w
	stamp := e.Stamp
	if x := c.fair.entries[m][w]; x != nil && c.now < x.hard {
		stamp = x.stamp
	}
	if e.Ok {
		switch {
		case held:
			return fmt.Sprintf("fair_lock.lua took master %d's key for %s, which holds %s's key until %v at least", m, w, k.token, k.soft)
		case !mine:
			if a := c.ahead(m, w, stamp); a != "" {
				return fmt.Sprintf("(order) fair_lock.lua took master %d's key for %s, not the queue's head: %s is queued before it", m, w, a)
			}
		}
		*k = key{e.Token, c.now + c.cfg.TTL - c.cfg.Drift, c.now + c.cfg.TTL}
		delete(c.fair.entries[m], w)
		if l != nil {
			l.set[m] = true
		}
		return ""
	}
	if gone && !c.mayBeAhead(m, w, stamp) {
		return fmt.Sprintf("fair_lock.lua refused %s master %d's key, which is free and %s is the queue's head", w, m, w)
	}
	claim := ""
	if e.Claim {
		claim = e.Token
	}
	c.queued(m, w, e.Stamp, claim)
	return ""
}

// fairStep applies the fair policy's other steps.
func (c *Checker) fairStep(e Event, l *lock) string {
	m, w := e.Master, e.Waiter
	switch e.Kind {
	case Hand:
		k := &c.keys[m]
		switch {
		case e.From != "" && e.From != "q":
			if _, maybe := c.holds(m, e.From); !maybe {
				return fmt.Sprintf("(handoff) master %d's key went on by %s's release, and it does not hold %s's key (%q): only the holder's own release hands it on", m, e.From, e.From, k.token)
			}
		case k.token != "" && k.token != "q" && c.now < k.soft:
			return fmt.Sprintf("(handoff) master %d's key handed on as free, and it holds %s's key until %v at least", m, k.token, k.soft)
		}
		if e.Token == "q" {
			// The reservation for a head without a claim: until the last
			// entry's deadline.
			*k = key{"q", c.now, c.now + max(c.cfg.EntryTTL+c.cfg.EntryDrift, c.cfg.TTL)}
			return ""
		}
		x := c.fair.entries[m][w]
		switch {
		case x == nil || c.now >= x.hard:
			return fmt.Sprintf("(order) master %d's key handed to %s, which has no entry in its queue", m, w)
		case c.ahead(m, w, x.stamp) != "":
			return fmt.Sprintf("(order) master %d's key handed to %s, not the queue's head: %s is queued before it", m, w, c.ahead(m, w, x.stamp))
		case !e.Ok && x.claim != e.Token:
			return fmt.Sprintf("hand_to_head gave %s token %s on master %d, not its claim %q", w, e.Token, m, x.claim)
		case !e.Ok && c.fair.passedIn[w]:
			return fmt.Sprintf("(claim) master %d's key handed to %s's claim, and %s took a lock passed in-process: it no longer waits on the masters", m, w, w)
		}
		*k = key{e.Token, c.now + c.cfg.TTL - c.cfg.Drift, c.now + c.cfg.TTL}
		delete(c.fair.entries[m], w)
		c.fair.waiterOf[e.Token] = w
		if t := c.locks[e.Token]; t != nil {
			t.set[m] = true
		}
	case Leave:
		delete(c.fair.entries[m], w)
	case Queue:
		c.queued(m, w, e.Stamp, "")
	case Pass:
		switch {
		case l == nil || !l.won || l.client != e.Client:
			return "a lock passed in-process that its client does not hold"
		case l.done:
			return "a lock passed in-process after its releases"
		case l.ended:
			return "(pass) a lock that had ended passed on in-process: a failed Extend ended it (fair.Policy.Unlock releases such a lock)"
		case c.now >= l.dl || e.Mono >= l.until:
			return fmt.Sprintf("(pass) a lock passed on in-process after its lease ran out at %v", l.dl)
		case l.inCS:
			return "a lock passed on in-process while its holder is at work"
		}
		l.won, l.passing, l.passAt = false, true, e.At
		if w != "" {
			c.fair.passedIn[w] = true
		}
	case Unlock:
		if l == nil || l.client != e.Client || !l.won && !l.ended {
			return "an Unlock of a lock its client was not given"
		}
		l.inCS = false
	case Ended:
		if l == nil || l.client != e.Client || !l.won {
			return "a lock ended that its client was not given"
		}
		l.ended = true
	}
	return ""
}

// passWon is the Won of a lock passed in-process: the recipient gets the
// holder's token and lease (Pass), and a fence of its own.
func (c *Checker) passWon(e Event, l *lock) string {
	switch {
	case l.client != e.Client:
		return "a lock passed in-process to another client's waiter"
	case e.Until > l.until:
		return fmt.Sprintf("the passed lock's lease ends at %v, past the holder's %v (Pass keeps the lease)", e.Until, l.until)
	case c.now >= l.dl || e.Mono >= e.Until:
		return fmt.Sprintf("a passed lock handed out after its lease ran out at %v", l.dl)
	case e.Fence != 0 && (e.Fence != c.last[e.Client] || c.lastAt[e.Client] < l.passAt):
		return fmt.Sprintf("fence %d is not the one minted for the passed lock", e.Fence)
	case e.Fence != 0 && c.used[e.Fence]:
		return fmt.Sprintf("(c) fence %d handed out with another lock before", e.Fence)
	}
	if e.Fence != 0 {
		c.used[e.Fence] = true
	}
	l.passing, l.won, l.until, l.fence = false, true, e.Until, e.Fence
	return ""
}
