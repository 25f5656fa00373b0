package sim

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// check runs the invariants over what the schedule did; each broken one is
// a violation.
func (r *run) check() {
	byRes := make(map[string][]holding)
	for _, h := range r.res.Holdings {
		for _, res := range h.resources {
			byRes[res] = append(byRes[res], h)
		}
	}
	for res, hs := range byRes {
		slices.SortFunc(hs, func(a, b holding) int { return a.got.Compare(b.got) })
		seen := make(map[uint64]holding)
		var last holding // of the holders before h, the one whose hold ended last
		var top holding  // ... and the one with the highest fence
		for i, h := range hs {
			f := fenceOf(h, res)
			if o, dup := seen[f]; dup && h.fenced {
				r.violation("fence %d of %s handed out twice: to c%d.%d at %v and c%d.%d at %v",
					f, res, o.client, o.worker, r.at(o.got), h.client, h.worker, r.at(h.got))
			}
			seen[f] = h
			if i > 0 && !r.s.Unsafe() {
				// Outside the documented failure modes: one holder at a
				// time, and fences in the order the holders won.
				if end := heldUntil(last); h.got.Before(end) {
					r.violation("two holders of %s: c%d.%d held it until %v, c%d.%d got it at %v",
						res, last.client, last.worker, r.at(end), h.client, h.worker, r.at(h.got))
				}
				if tf := fenceOf(top, res); f <= tf {
					r.violation("fences of %s out of order: %d (c%d.%d at %v) after %d (c%d.%d at %v)",
						res, f, h.client, h.worker, r.at(h.got), tf, top.client, top.worker, r.at(top.got))
				}
			}
			if i == 0 || heldUntil(h).After(heldUntil(last)) {
				last = h
			}
			if i == 0 || f > fenceOf(top, res) {
				top = h
			}
		}
	}

	// Liveness: while a Lock waits for a resource, the resource is never free
	// for longer than a TTL in a stretch of the schedule with no fault (and
	// none in the TTL before it, whose keys could still be there). In a mixed
	// deployment (WithFairness on some clients only, against its doc) a
	// client without fairness finds the key reserved for the fair queue's
	// head after every release while fair waiters are queued, and may wait
	// as long as they keep coming: only the fair clients' waits are checked
	// there.
	mixed := slices.Contains(r.s.Fair, true) && slices.Contains(r.s.Fair, false)
	for _, w := range r.res.Waits {
		if mixed && !r.s.Fair[w.client] {
			continue
		}
		cur := w.began
		gap := func(to time.Time) {
			if to.After(w.ended) {
				to = w.ended
			}
			if to.Sub(cur) > r.s.Config.TTL && r.healthy(cur.Add(-r.s.Config.TTL), to) {
				r.violation("c%d.%d waited for %s from %v to %v (won: %v), and nobody held it from %v to %v, over a TTL, with no fault",
					w.client, w.worker, w.resource, r.at(w.began), r.at(w.ended), w.won, r.at(cur), r.at(to))
			}
		}
		for _, h := range byRes[w.resource] { // sorted by got above
			if !heldUntil(h).After(cur) {
				continue
			}
			if h.got.After(cur) {
				gap(h.got)
			}
			cur = heldUntil(h)
			if !cur.Before(w.ended) {
				break
			}
		}
		if cur.Before(w.ended) {
			gap(w.ended)
		}
	}

	// Arrival order: where every client is fair and no client's wall clock
	// stepped (the arrival stamps are read on it), a Lock that began more
	// than orderBound before another client's Lock of the same resource
	// wins first, when both win and no fault was in effect from a TTL
	// before the earlier one began to its win. The bound: a waiter that
	// waits here first (its client's waiters are already listed) has no
	// entry on the masters until its first queued attempt, at most an
	// entry refresh after it began; until then a later waiter of another
	// client may queue ahead of it, or be passed the lock on a view of the
	// queue that did not show it (docs/design.md, "Fair handoff").
	if !slices.Contains(r.s.Fair, false) && !slices.ContainsFunc(r.s.Faults, func(f fault) bool { return f.kind == clientWallStep }) {
		won := make(map[string][]waited)
		for _, w := range r.res.Waits {
			if w.won {
				won[w.resource] = append(won[w.resource], w)
			}
		}
		for res, ws := range won {
			for _, a := range ws {
				if !r.healthy(a.began.Add(-r.s.Config.TTL), a.ended) {
					continue
				}
				for _, b := range ws {
					if b.client != a.client && b.began.Sub(a.began) > orderBound && b.ended.Before(a.ended) {
						r.violation("out of arrival order on %s: c%d.%d began at %v and won at %v, c%d.%d began %v later and won first, at %v",
							res, a.client, a.worker, r.at(a.began), r.at(a.ended), b.client, b.worker, b.began.Sub(a.began), r.at(b.ended))
					}
				}
			}
		}
	}

	// Leadership: a term's fence is never handed out twice; outside the
	// documented failure modes, a term begins only once the one before it
	// has ended (its context closed), and fences rise with the terms.
	terms := slices.Clone(r.res.Terms)
	slices.SortFunc(terms, func(a, b term) int { return a.start.Compare(b.start) })
	fences := make(map[uint64]term)
	for i, t := range terms {
		if o, dup := fences[t.fence]; dup {
			r.violation("term fence %d handed out twice: to c%d at %v and c%d at %v", t.fence, o.client, r.at(o.start), t.client, r.at(t.start))
		}
		fences[t.fence] = t
		if i == 0 || r.s.Unsafe() {
			continue
		}
		for _, o := range terms[:i] {
			if t.start.Before(o.end) {
				r.violation("two leaders: c%d's term (fence %d) began at %v, before c%d's (fence %d) ended at %v",
					t.client, t.fence, r.at(t.start), o.client, o.fence, r.at(o.end))
			}
			if t.fence <= o.fence {
				r.violation("term fences out of order: %d (c%d at %v) after %d (c%d at %v)", t.fence, t.client, r.at(t.start), o.fence, o.client, r.at(o.start))
			}
		}
	}

	r.checkWrongType()
	if len(r.s.Bursts) > 0 {
		r.checkHandover(byRes)
		r.checkTryBursts()
	}

	// The guard: in the order the store applied them, an admitted write
	// never carries a fence below one admitted before it, and the last
	// admitted write is what the store keeps.
	top := make(map[string]write)
	for _, w := range r.res.Writes {
		t, ok := top[w.key]
		if w.admitted {
			if ok && w.fence < t.fence {
				r.violation("the guard admitted a stale write to %s: fence %d at %v after %d at %v",
					w.key, w.fence, r.at(w.at), t.fence, r.at(t.at))
			}
			top[w.key] = w
		} else if !ok || w.fence >= t.fence {
			r.violation("the guard refused a current write to %s: fence %d at %v (newest admitted %d)",
				w.key, w.fence, r.at(w.at), t.fence)
		}
	}
	// A leader's write that landed after its term had ended (sent in the
	// term, in flight past it): the guard must refuse it once a later
	// term's write was admitted (the stale-write row above checks that);
	// counted, to show it happens.
	for _, w := range r.res.Writes {
		if w.key != "data:relay" {
			continue
		}
		if t, ok := fences[w.fence]; ok && !t.end.IsZero() && w.at.After(t.end) {
			r.hit("a leader's write landed after its term")
			if !w.admitted {
				r.hit("a leader's in-flight write refused after its term")
			}
		}
	}
	for key, t := range top {
		_, f, err := r.guard.Get(context.Background(), r.w.Store.Conn(), key)
		if err != nil || f != t.fence {
			r.violation("an acknowledged write to %s is lost: the store has fence %d (%v), the last admitted was %d", key, f, err, t.fence)
		}
	}
}

// orderBound is how much earlier a fair Lock must begin than another
// client's to be sure to win first: an entry refresh (a third of the
// entry TTL the clients are given) and two node timeouts for the rounds.
const orderBound = fairEntryTTL/3 + 2*nodeTimeout

// healthy reports whether no fault of the schedule was in effect between
// a and b.
func (r *run) healthy(a, b time.Time) bool {
	every := func(int) bool { return true }
	return r.undisturbed(a, b, every, func(fault) bool { return true })
}

// fenceOf is h's fence for res.
func fenceOf(h holding, res string) uint64 {
	if i := slices.Index(h.resources, res); i >= 0 && i < len(h.fences) {
		return h.fences[i]
	}
	return 0
}

// heldUntil is when h stopped holding: its Unlock, or its lease's end.
func heldUntil(h holding) time.Time {
	if h.end.Before(h.until) {
		return h.end
	}
	return h.until
}

// at is t as an offset from the schedule's start.
func (r *run) at(t time.Time) time.Duration { return t.Sub(r.start) }

// handoverBound is invariant B's (issue 34): how long a crowd's resource
// may be free while a Lock waits for it, on masters that are healthy and
// have been since the last fault's keys are gone. The release of the
// holder before (its Unlock returned: no key of its left), then the
// wake-up (a release's message, or the retry delay's poll, 20 ms and up
// to 10 of jitter, for a waiter that was not listening; after a wake-up
// whose attempt lost, up to 16 ms more), the winner's attempt (a probe of
// one master and the round, within a node timeout each) and its fence:
// four node timeouts hold all of it with room to spare, and are a fifth
// of the shortest TTL, which a waiter asleep on a key's expiry would wait.
const handoverBound = 4 * nodeTimeout

// checkHandover checks invariant B on every burst's resource: no stretch
// in which the resource is free (no holding from its Lock's return to its
// keys' release), a Lock waits for it and the world is settled (see
// unsettled) lasts longer than handoverBound. In a mixed deployment a
// plain client's Lock may starve while fair waiters are about (as
// documented): its waits count only where no fair Lock waited on the
// resource within an entry TTL before (a reservation for a fair head lives
// that long). Before the lockw: channel, such a waiter slept a whole TTL
// after the fair waiters were gone.
func (r *run) checkHandover(byRes map[string][]holding) {
	mixed := slices.Contains(r.s.Fair, true) && slices.Contains(r.s.Fair, false)
	unsettled := r.unsettled()
	for _, u := range r.s.Bursts {
		var busy, waiting, plain, fairAbout []stretch
		for _, h := range byRes[u.resource] {
			busy = append(busy, stretch{h.got, freedAt(h)})
		}
		for _, w := range r.res.Waits {
			switch {
			case w.resource != u.resource:
			case !mixed:
				waiting = append(waiting, stretch{w.began, w.ended})
			case r.s.Fair[w.client]:
				waiting = append(waiting, stretch{w.began, w.ended})
				fairAbout = append(fairAbout, stretch{w.began, w.ended.Add(fairEntryTTL + nodeTimeout)})
			default:
				plain = append(plain, stretch{w.began, w.ended})
			}
		}
		if len(plain) > 0 {
			waiting = append(waiting, without(merged(plain), merged(fairAbout))...)
		}
		for _, f := range without(without(merged(waiting), merged(busy)), unsettled) {
			if f.to.Sub(f.from) <= handoverBound {
				continue
			}
			n := 0
			for _, w := range r.res.Waits {
				if w.resource == u.resource && !w.began.After(f.from) && w.ended.After(f.from) {
					n++
				}
			}
			before := "none"
			for _, h := range byRes[u.resource] {
				if !freedAt(h).After(f.from) {
					before = fmt.Sprintf("c%d.%d, keys released at %v", h.client, h.worker, r.at(freedAt(h)))
				}
			}
			r.violation("%s was free from %v to %v (%v, beyond %v) while %d Lock calls waited for it, on healthy masters, and none won it (the holder before: %s)",
				u.resource, r.at(f.from), r.at(f.to), f.to.Sub(f.from), handoverBound, n, before)
		}
	}
}

// checkTryBursts checks that a TryLock burst on a free resource (each
// burst has its own) ends with exactly one winner when the world was
// settled from its first call to its last return (issue 34): none is a
// split vote that nobody retried.
func (r *run) checkTryBursts() {
	unsettled := r.unsettled()
	for _, b := range r.res.TryBursts {
		if b.won == 1 || slices.ContainsFunc(unsettled, func(u stretch) bool { return u.from.Before(b.to) && u.to.After(b.from) }) {
			continue
		}
		r.violation("a TryLock burst of %d calls on free %s from %v to %v, on healthy masters, ended with %d winners, not one (the others: %s)",
			b.calls, b.resource, r.at(b.from), r.at(b.to), b.won, b.errs)
	}
}

// unsettled is when a fault was in effect, or had ended too recently for
// its effects to be gone: releaseRetryBound after a latency spike (the
// releases it held up have landed then: invariant A), a TTL after any
// other fault (the key a paused master applied after its caller gave up,
// or one a master kept while it could not be reached, lives out its TTL).
func (r *run) unsettled() []stretch {
	var out []stretch
	for _, f := range r.faults() {
		settle := r.s.Config.TTL
		if f.kind == spike {
			settle = releaseRetryBound
		}
		out = append(out, stretch{r.start.Add(f.at), r.start.Add(f.at + f.lasts + settle)})
	}
	return merged(out)
}

// freedAt is when h's keys were gone: when its Unlock returned, or its
// lease's end.
func freedAt(h holding) time.Time {
	t := h.released
	if t.IsZero() {
		t = h.end
	}
	if h.until.Before(t) {
		return h.until
	}
	return t
}

// stretch is a span of virtual time.
type stretch struct{ from, to time.Time }

// merged is ss sorted, with those that overlap or touch joined.
func merged(ss []stretch) []stretch {
	ss = slices.Clone(ss)
	slices.SortFunc(ss, func(a, b stretch) int { return a.from.Compare(b.from) })
	var out []stretch
	for _, s := range ss {
		if n := len(out); n > 0 && !s.from.After(out[n-1].to) {
			if s.to.After(out[n-1].to) {
				out[n-1].to = s.to
			}
			continue
		}
		out = append(out, s)
	}
	return out
}

// without is a less b; both merged.
func without(a, b []stretch) []stretch {
	var out []stretch
	for _, x := range a {
		cur := x.from
		for _, y := range b {
			if !y.to.After(cur) || !y.from.Before(x.to) {
				continue
			}
			if y.from.After(cur) {
				out = append(out, stretch{cur, y.from})
			}
			if y.to.After(cur) {
				cur = y.to
			}
		}
		if cur.Before(x.to) {
			out = append(out, stretch{cur, x.to})
		}
	}
	return out
}

// wrongTypeBoundFor is how long a Lock may go on waiting for a resource
// whose key has another type on every master, while every master answers
// its client, for locks of ttl. Writing a key of another type sends no
// message: a waiter asleep until the key it saw expires (up to a TTL) or
// until the fair queue's reservation lapses (up to an entry TTL) wakes
// then; its next attempt's round and the release that follows it, which
// read the key's type, take two node timeouts more. Four, with room.
func wrongTypeBoundFor(ttl time.Duration) time.Duration {
	return max(ttl, fairEntryTTL) + 4*nodeTimeout
}

// checkWrongType: a Lock waiting for a resource whose lock key has another
// type on every master stops (ErrWrongType) within wrongTypeBoundFor, when
// every master answers its client then: it does not wait on a key that no
// release will ever free, whichever master its attempts ask first.
func (r *run) checkWrongType() {
	for _, ws := range r.wrongs {
		for _, w := range r.res.Waits {
			if w.resource != ws.resource {
				continue
			}
			from := w.began
			if ws.from.After(from) {
				from = ws.from
			}
			to := from.Add(wrongTypeBoundFor(r.s.Config.TTL))
			if !w.ended.After(to) || ws.to.Before(to) {
				continue
			}
			up := true
			for i := range r.w.Masters {
				up = up && r.answers(w.client, i, from.Add(-outMemory), to)
			}
			if up {
				r.violation("c%d.%d's Lock of %s went on waiting from %v to %v though its key had another type on every master from %v to %v",
					w.client, w.worker, w.resource, r.at(w.began), r.at(w.ended), r.at(ws.from), r.at(ws.to))
			}
		}
	}
}
