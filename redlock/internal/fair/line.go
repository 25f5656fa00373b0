package fair

// The in-process half of the fair policy: one Client's queued waiters, by
// lock key, in the order of their arrival stamps, and what its releases may
// do with them: pick the first waiter to hand the lock to, and decide
// whether the lock may pass to it in-process with no round (it is ahead of
// every other client's waiter) or must go through the masters. All of it
// is one type under one mutex, like golang.org/x/sync/semaphore's waiter
// list. It does not call the masters: the policy (policy.go, handoff.go)
// runs the queue scripts and the handoff rounds, and L is the lock it
// hands over.

import (
	"context"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Line is one Client's queued waiters. The zero value is ready to use.
type Line[L comparable] struct {
	mu    sync.Mutex
	m     map[string][]*Waiter[L] // by lock key, in id order (the stamps' order)
	views map[string]view
	// Wall reads the clock of the arrival stamps, µs since the Unix epoch
	// (nil: the system's wall clock). Set before the first waiter.
	Wall func() int64
}

// wall is f.Wall's reading.
func (f *Line[L]) wall() int64 {
	if f.Wall != nil {
		return f.Wall()
	}
	return time.Now().UnixMicro()
}

// view is what a queued attempt of this client saw of the other clients'
// waiters on a lock: when it began (at, µs on the clock of the arrival
// stamps), every waiter of another client queued on a majority had a stamp
// of foreign or later. A waiter of ours that arrived before at with a
// stamp below foreign is ahead of every other client's waiter that had
// queued by then, and of every one that arrives later: see covered.
type view struct{ at, foreign int64 }

// Waiter is one Lock call in the line. Its unexported fields are guarded by
// the Line's mutex.
type Waiter[L comparable] struct {
	ID    string        // sorts like (stamp, client tag, tiebreak)
	At    int64         // the arrival stamp, µs since the Unix epoch
	Key   string        // the lock key
	TTL   time.Duration // of the lock it waits for: what a direct handoff sets
	Entry string        // the caller's: how a script that removes its entry names it
	Grant chan L        // cap 1: a lock handed to the waiter
	nudge func()        // try again at once
	// Claimed: an attempt of the waiter may have left a claim on the
	// masters (a release there hands the key to it, with its attempt's
	// token): it may end its wait only through the masters, never by a
	// lock passed in-process, which would leave the claim behind, and a
	// release would hand the key to a waiter that is gone, for the lock's
	// TTL.
	Claimed atomic.Bool

	listed     bool   // in the line
	granting   bool   // a releaser picked it and has not finished
	attempting bool   // an attempt of its is running
	attempts   uint64 // attempts started
	pending    bool   // the last attempt left calls that outlived its round
	started    int64  // when the last attempt began, µs on the stamps' clock
	passComing bool   // next in line while a Lock of this client holds: its Unlock will pick it
	toAttempt  bool   // nudged to make its first attempt, not begun yet
	// What a releaser saw when it picked it: an attempt may have put its
	// entry back after the handoff removed it.
	pickAttempts   uint64
	pickAttempting bool
}

// NewWaiter returns a waiter with id and arrival stamp at for a lock on key
// for ttl; nudge wakes it to try again at once.
func NewWaiter[L comparable](id string, at int64, key string, ttl time.Duration, nudge func()) *Waiter[L] {
	return &Waiter[L]{ID: id, At: at, Key: key, TTL: ttl, Grant: make(chan L, 1), nudge: nudge}
}

// Nudge wakes w to try again at once.
func (w *Waiter[L]) Nudge() { w.nudge() }

// List puts w in the line, where releases of this client may hand it the lock.
// A waiter with no entry on the masters that finds the line empty (the
// waiters it saw queued left before it was listed) is next in line with
// nobody to line it up: it is nudged to make its first attempt, so that its
// entry is on the masters before the holder's release.
func (f *Line[L]) List(w *Waiter[L]) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if w.listed {
		return
	}
	if f.m == nil {
		f.m = make(map[string][]*Waiter[L])
	}
	ws := f.m[w.Key]
	at, _ := slices.BinarySearchFunc(ws, w, func(a, b *Waiter[L]) int { return strings.Compare(a.ID, b.ID) })
	f.m[w.Key] = slices.Insert(ws, at, w)
	w.listed = true
	if len(ws) == 0 && lazy(w) {
		f.nextInLine(w, false)
	}
}

// keptViews is how many views of keys nobody of this client waits on are
// kept: the next Lock call on such a key reads whether another client's
// waiter was queued (Claims). A view predates every waiter that comes
// later, so it covers none of them.
const keptViews = 64

// forget drops the views of keys with no waiter listed once there are
// more than keptViews of them. f.mu is held.
func (f *Line[L]) forget() {
	if len(f.views) <= len(f.m)+keptViews {
		return
	}
	for k := range f.views {
		if _, ok := f.m[k]; !ok {
			delete(f.views, k)
		}
	}
}

// Unlist takes w out of the line (took is the lock it returns with, or the
// zero L) and returns a lock handed to it that it will not take, for the
// caller to free.
func (f *Line[L]) Unlist(w *Waiter[L], took L) (left L) {
	var zero L
	f.mu.Lock()
	if w.listed {
		first := len(f.m[w.Key]) > 0 && f.m[w.Key][0] == w
		ws := slices.DeleteFunc(f.m[w.Key], func(o *Waiter[L]) bool { return o == w })
		if len(ws) == 0 {
			delete(f.m, w.Key)
			f.forget()
		} else {
			f.m[w.Key] = ws
			if first {
				f.lineUp(ws, 0, took != zero) // see AwaitTurn
			}
		}
		w.listed = false
	}
	select {
	case left = <-w.Grant:
	default:
	}
	f.mu.Unlock()
	if left == took {
		return zero
	}
	return left
}

// AwaitTurn is the first wait of a Lock call that found waiters of its
// client queued on the resource: listed, with no entry on the masters yet,
// it waits for a lock passed to it, for the nudge that makes it next in
// line when it is not sure to be passed the lock, or for refresh, and then
// makes its first queued attempt (ok false). A waiter that a recent attempt
// of its client covers is passed the lock with no round of its own: about
// one queued round per batch of waiters instead of one per waiter.
func (f *Line[L]) AwaitTurn(ctx context.Context, w *Waiter[L], wake <-chan struct{}, refresh time.Duration) (l L, ok bool, err error) {
	t := time.NewTimer(refresh)
	defer t.Stop()
	for {
		select {
		case l := <-w.Grant:
			return l, true, nil
		case <-wake:
			if !f.passWillCome(w) {
				return l, false, nil
			}
		case <-t.C:
			return l, false, nil
		case <-ctx.Done():
			return l, false, ctx.Err()
		}
	}
}

// passWillCome reports whether w, nudged as next in line, may wait for the
// lock: a Lock of this client holds it, whose Unlock passes it to w when
// covered.
func (f *Line[L]) passWillCome(w *Waiter[L]) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if w.passComing && f.covered(w) {
		w.toAttempt = false
		return true
	}
	return false
}

// covered reports whether the last view of w's lock puts w ahead of every
// waiter of another client: w arrived before that attempt began and no
// other client's waiter then queued had an earlier stamp. One that queues
// later has a later stamp (up to the skew of the clients' clocks, which
// bends the order as it does every stamp's). f.mu is held.
func (f *Line[L]) covered(w *Waiter[L]) bool {
	v, ok := f.views[w.Key]
	return ok && w.At <= v.at && w.At < v.foreign
}

// lazy reports whether w never began an attempt: it has no entry on the
// masters. f.mu is held.
func lazy[L comparable](w *Waiter[L]) bool {
	return w.attempts == 0 && !w.attempting
}

// lineUp nudges the waiters of ws (one lock's, in queue order) after the
// line moved: ws[from] is next in line. While a Lock of ours holds
// (passing), the waiter after it, when it never queued on the masters and
// no view covers it, makes its first attempt now, during the section
// before its turn: its view, which covers it and every waiter listed
// behind it, is there when its turn comes, and no Unlock waits on it.
// f.mu is held.
func (f *Line[L]) lineUp(ws []*Waiter[L], from int, passing bool) {
	if from >= len(ws) {
		return
	}
	f.nextInLine(ws[from], passing)
	if !passing || from+1 >= len(ws) {
		return
	}
	n := ws[from+1]
	if !lazy(n) || f.covered(n) {
		return
	}
	for _, o := range ws {
		if o.toAttempt || (o.attempting && o.started >= n.At) {
			return // its view will cover n
		}
	}
	n.passComing, n.toAttempt = false, true
	n.nudge()
}

// nextInLine nudges w, now next in line, out of AwaitTurn: passing tells
// it whether a Lock of this client holds the lock (its Unlock will pick
// w). A waiter that queued on the masters already is left alone while
// passing: its entry is there, and a pass reaches it where it waits; else
// it tries again at once. f.mu is held.
func (f *Line[L]) nextInLine(w *Waiter[L], passing bool) {
	if lazy(w) {
		if w.toAttempt {
			return // on its way to its first attempt: a second nudge would be a second attempt
		}
		w.passComing = passing
		w.toAttempt = !passing || !f.covered(w) // see passWillCome
		w.nudge()
	} else if !passing {
		w.nudge()
	}
}

// Claims reports whether w's next attempt should claim the key on the
// masters: w is the only waiter of this client listed on its key (none
// other can be passed the lock in-process, so a release of another client
// must reach it through the masters) and the last view of the key, within
// claimsFor, showed a waiter of another client queued (whose release may be
// the one). The view may be an earlier Lock call's: a client whose
// goroutine takes turns with other processes' waits on the key again and
// again, each call a new waiter.
//
// It is decided under the Line's mutex with Pick: a waiter that a releaser
// picked claims nothing (the pick may pass it the lock in-process), and a
// waiter that claims is marked Claimed before any later Pick reads it, so
// that no pass reaches it (it ends its wait through the masters).
func (f *Line[L]) Claims(w *Waiter[L]) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if w.granting || len(w.Grant) > 0 {
		return false
	}
	ws := f.m[w.Key]
	v, ok := f.views[w.Key]
	recent := ok && f.wall()-v.at < claimsFor.Microseconds()
	claims := (len(ws) == 0 || len(ws) == 1 && ws[0] == w) && recent && v.foreign != NoForeign
	if claims {
		w.Claimed.Store(true)
	}
	return claims
}

// claimsFor is how long a view of another client's waiter queued on a key
// has a waiter of ours claim it.
const claimsFor = 2 * time.Second

// WaitedOn reports whether waiters of this client are queued on key.
func (f *Line[L]) WaitedOn(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.m[key]) > 0
}

// Attempting records that w starts an attempt (on) or finished one
// (pending: calls of it outlived its round). It reports false, and records
// nothing, when a lock passed to w waits in its Grant: w takes that instead
// of starting an attempt, which would put its entry on the masters after
// the pass decided that it had none (see Deliver).
func (f *Line[L]) Attempting(w *Waiter[L], on, pending bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if on && len(w.Grant) > 0 {
		return false
	}
	w.attempting = on
	if on {
		w.toAttempt = false
		w.attempts++
		w.started = f.wall()
	} else {
		w.pending = pending
	}
	return true
}

// Pick returns the first listed waiter on key that no releaser is handing a
// lock to, marked as picked, or nil; whether it is covered (the lock may
// pass to it in-process: never to a waiter that Claimed, see Claims); and
// whether it never queued on the masters. Every Pick is followed by
// Deliver or Unpick.
func (f *Line[L]) Pick(key string) (w *Waiter[L], covered, never bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range f.m[key] {
		if !w.granting && len(w.Grant) == 0 {
			w.granting = true
			w.pickAttempts, w.pickAttempting = w.attempts, w.attempting || w.pending
			return w, f.covered(w) && !w.Claimed.Load(), w.pickAttempts == 0 && !w.pickAttempting
		}
	}
	return nil, false, false
}

// Unpick ends a pick of w that hands it nothing; w, never queued on the
// masters, is nudged to make its first attempt: no Lock of ours will pass
// it the lock.
func (f *Line[L]) Unpick(w *Waiter[L]) {
	f.mu.Lock()
	w.granting = false
	if w.listed {
		f.nextInLine(w, false)
	}
	f.mu.Unlock()
}

// Observe records what w's lost attempt saw as its lock's view (foreign:
// the earliest stamp of another client's waiter queued, math.MaxInt64 for
// none, read on a majority), unless a later attempt's is there.
func (f *Line[L]) Observe(w *Waiter[L], foreign int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if v, ok := f.views[w.Key]; ok && v.at > w.started {
		return
	}
	if f.views == nil {
		f.views = make(map[string]view)
	}
	f.views[w.Key] = view{at: w.started, foreign: foreign}
}

// NoForeign is Observe's foreign when no other client's waiter is queued.
const NoForeign = math.MaxInt64

// Raced reports whether an attempt of w ran during the handoff it took:
// its entry may then be back on masters that removed it.
func (f *Line[L]) Raced(w *Waiter[L]) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return w.pickAttempting || w.attempts != w.pickAttempts
}

// Deliver ends a pick of w by handing it l, and reports whether w took it
// (false: w left the line; the caller frees l). The waiter listed after w
// is then next in line, and is nudged to put its entry on the masters (see
// AwaitTurn). When l was passed in-process and w has an entry on the
// masters (put there by an attempt that may have begun after the pick),
// stale is called, before w can see l, to have l's release remove it.
func (f *Line[L]) Deliver(w *Waiter[L], l L, passed bool, stale func()) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	w.granting = false
	if !w.listed {
		return false
	}
	if passed && !lazy(w) {
		// A covered waiter that never queued on the masters has no entry,
		// and starts no attempt from now on: see Attempting.
		stale()
	}
	w.Grant <- l // cap 1, and one handoff at a time
	ws := f.m[w.Key]
	if i := slices.Index(ws, w); i >= 0 {
		f.lineUp(ws, i+1, true)
	}
	return true
}

// Withdraw ends a pick of w that handed it nothing, without a nudge: the
// caller wakes w itself once the masters let the keys go.
func (f *Line[L]) Withdraw(w *Waiter[L]) {
	f.mu.Lock()
	w.granting = false
	f.mu.Unlock()
}

// State is what Inspect shows of a listed waiter.
type State struct {
	Covered  bool   // ahead of every other client's waiter: a pass may reach it
	Never    bool   // never queued on the masters
	Attempts uint64 // attempts started
}

// Inspect reports fn of the waiters listed on key, in line order (for tests).
func (f *Line[L]) Inspect(key string, fn func([]State) bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	var st []State
	for _, w := range f.m[key] {
		st = append(st, State{Covered: f.covered(w), Never: lazy(w), Attempts: w.attempts})
	}
	return fn(st)
}
