package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"quorumlock.dev/quorum"
	"quorumlock.dev/redlock/internal/wait"
)

// A burst of TryLock calls on a free resource used to end with no holder:
// a few attempts that ran at once split the masters between them, none
// had a majority, each released what it had set, and every other call was
// refused by those keys as if a holder had the lock. Two rules make a
// burst end with one holder (docs/design.md, "Crowds"):
//
//   - Calls of one Client on one resource that overlap share one attempt
//     (a flight): the first makes it, the others take its outcome. Won, it
//     is the first call's lock and the others' ErrNotAcquired.
//   - A lost attempt is a refusal only when another token holds a majority
//     of the masters or may still (counting the masters whose holder is
//     not known as its). Otherwise the votes were split (no attempt holds
//     a majority, and each of those that took part releases what it set):
//     the attempt is made again after a random delay, up to splitRetries
//     times, in windows that double.

// splitRetries bounds the attempts a TryLock makes again after split votes.
const splitRetries = 5

// flight is the attempt that overlapping TryLock calls of one Client on
// one resource share. Its fields are written under flights.mu; done is
// made by the first follower (an uncontended TryLock makes no channel).
type flight struct {
	done chan struct{}
	won  bool  // the first call won the lock
	err  error // its error otherwise
	quit bool  // the first call's context ended it: no outcome to share
}

// flights are the attempts in flight, by resource.
type flights struct {
	mu sync.Mutex
	m  map[string]*flight
}

// join returns the flight on resource and whether the caller leads it: a
// leader makes the attempt and ends the flight with land; a follower waits
// for f.done and reads f's outcome.
func (fs *flights) join(resource string) (f *flight, lead bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f, ok := fs.m[resource]; ok {
		if f.done == nil {
			f.done = make(chan struct{})
		}
		return f, false
	}
	if fs.m == nil {
		fs.m = make(map[string]*flight)
	}
	f = &flight{}
	fs.m[resource] = f
	return f, true
}

// land ends the flight f on resource with its leader's outcome; quit says
// that the leader's caller gave up.
func (fs *flights) land(resource string, f *flight, won bool, err error, quit bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	delete(fs.m, resource)
	if f.done != nil {
		f.won, f.err, f.quit = won, err, quit
		close(f.done)
	}
}

// tryLock is TryLock once its arguments are checked: it leads the flight
// on resource or takes the outcome of the one in the air. A follower whose
// leader was stopped by its own caller's context (or whose leader's
// attempt was never made) makes an attempt of its own. That is read from
// the leader's context, not from its error: an attempt that timed out by
// itself (a node timeout, a mint that got no reply before the lock's
// validity ran out) wraps context.DeadlineExceeded too, and its followers
// took it for their leader giving up: each made an attempt in turn, the
// last of a crowd waiting for all of them (the simulator, seed
// 6359995783438721510).
func (c *Client) tryLock(ctx context.Context, resource string, ttl time.Duration) (*Lock, error) {
	for {
		f, lead := c.flights.join(resource)
		if lead {
			l, err := c.trySplit(ctx, resource, ttl)
			c.flights.land(resource, f, err == nil, err, err != nil && ctx.Err() != nil)
			return l, err
		}
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("redlock: not attempted: the context ended while another TryLock of this client on %q was in flight: %w", resource, ctx.Err())
		}
		switch {
		case f.won:
			return nil, fmt.Errorf("%w: another TryLock of this client won it", ErrNotAcquired)
		case f.quit:
			continue // its caller gave up: no outcome to share
		}
		return nil, fmt.Errorf("redlock: the outcome of another TryLock of this client on %q: %w", resource, f.err)
	}
}

// trySplit is one attempt, made again after a random delay while its
// votes were split (see split): at most splitRetries more times.
func (c *Client) trySplit(ctx context.Context, resource string, ttl time.Duration) (*Lock, error) {
	rnd := c.stream()
	window := max(c.cfg.nodeTimeout/16, time.Millisecond)
	var t *time.Timer
	for k := 0; ; k++ {
		l, round, err := c.attempt(ctx, resource, ttl)
		if err == nil || k == splitRetries || !c.split(ctx, round, resource, err) {
			return l, err
		}
		pause := wait.RandN(rnd, window)
		window = min(2*window, c.cfg.nodeTimeout)
		if t == nil {
			t = time.NewTimer(pause)
			defer t.Stop()
		} else {
			t.Reset(pause)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, errors.Join(err, ctx.Err())
		}
	}
}

// split reports a lost round (err its error) in which no token holds a
// majority of the masters or may still reach one: those who set keys in it
// lost too, and release them. It reads who holds the key on the masters
// that refused, in time or after the round was decided; a master whose
// holder is not known (its call or the read failed or did not answer) may
// be any token's. A round that lost to keys
// of another type is no split.
func (c *Client) split(ctx context.Context, round *quorum.Round, resource string, err error) bool {
	if round == nil || !errors.Is(err, ErrNotAcquired) || ctx.Err() != nil {
		return false
	}
	replies := c.readHolders(ctx, round, "lock:"+resource, true)
	counts := make(map[string]int, len(replies))
	best, unknown := 0, 0
	for i, r := range replies {
		switch {
		case r.OK && r.Token != "":
			counts[r.Token]++
			best = max(best, counts[r.Token])
		case !r.OK && !ours(round, i):
			unknown++
		}
	}
	// A holder, or the queue's head being handed the key, or one that
	// the masters we cannot read may make one.
	return best+unknown < c.quorum
}

// ours reports whether master i took our key in round, in time or after
// the round was decided (the release that followed has freed it).
func ours(round *quorum.Round, i int) bool {
	agreed, _, ok := round.Returned(i)
	return ok && agreed
}
