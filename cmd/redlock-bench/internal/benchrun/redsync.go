package benchrun

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
)

// The contended scenario's redsync rows (-clients) are a baseline: another
// Redlock client as its users run it. Each Lock is NewMutex and LockContext
// with redsync's defaults (8 s expiry replaced by the TTL; a per-try timeout
// of 5% of it; a retry delay of 50-250 ms at random), except that it tries
// often enough for the wait bound, not the scenario's tries, to end a wait:
// redsync's 32 tries would give up after about 5 s.
const (
	// redsync's default retry delay is uniform in [redsyncMinDelay, redsyncMaxDelay).
	redsyncMinDelay = 50 * time.Millisecond
	redsyncMaxDelay = 250 * time.Millisecond
)

// redsyncTries is enough tries of redsync's shortest delay to last the wait bound.
func redsyncTries(ttl time.Duration) int { return int(waitBound(ttl)/redsyncMinDelay) + 1 }

// redsyncDelay is redsync's default retry delay.
func redsyncDelay() time.Duration {
	return redsyncMinDelay + rand.N(redsyncMaxDelay-redsyncMinDelay)
}

// redsyncLocker is one goroutine's redsync: the go-redis clients of its group
// of goroutines (one per master) behind pools that count the masters each of
// its attempts won, for the split column. One goroutine uses it, one Lock at a
// time; redsync calls each pool once per phase of an attempt and waits for all.
type redsyncLocker struct {
	rs         *redsync.Redsync
	quorum     int
	counted    *rounds
	calls, won atomic.Int32 // the SetNX calls of the attempt under way, and the ones that set the key
}

func newRedsyncLocker(masters []redsyncredis.Pool, counted *rounds) *redsyncLocker {
	l := &redsyncLocker{quorum: len(masters)/2 + 1, counted: counted}
	pools := make([]redsyncredis.Pool, len(masters))
	for i, p := range masters {
		pools[i] = &countingPool{pool: p, conn: &countingConn{locker: l}}
	}
	l.rs = redsync.New(pools...)
	return l
}

// lock waits for resource as a redsync user would, under the key redlock
// uses for it.
func (l *redsyncLocker) lock(ctx context.Context, resource string, ttl time.Duration) (unlocker, error) {
	m := l.rs.NewMutex("lock:"+resource, redsync.WithExpiry(ttl), redsync.WithTries(redsyncTries(ttl)),
		redsync.WithRetryDelayFunc(l.retry))
	err := m.LockContext(ctx)
	l.settle(err == nil)
	return redsyncHeld{m}, err
}

// retry is redsync's default delay; redsync calls it after each lost attempt.
func (l *redsyncLocker) retry(int) time.Duration {
	l.settle(false)
	return redsyncDelay()
}

// settle counts the attempt that just ended, if one did: a lost one that won
// some masters but not a quorum split the votes.
func (l *redsyncLocker) settle(won bool) {
	calls, got := l.calls.Swap(0), l.won.Swap(0)
	if calls == 0 {
		return // the wait ended in a delay, with no attempt after the last counted
	}
	l.counted.all.Add(1)
	if !won {
		l.counted.lost.Add(1)
		if got > 0 && int(got) < l.quorum {
			l.counted.split.Add(1)
		}
	}
}

// countingPool hands out its one countingConn: redsync gets a connection per
// pool per phase, and waits for every one before the next phase, so that one
// is never used twice at once and costs no allocation.
type countingPool struct {
	pool redsyncredis.Pool
	conn *countingConn
}

func (p *countingPool) Get(ctx context.Context) (redsyncredis.Conn, error) {
	c, err := p.pool.Get(ctx)
	if err != nil {
		return nil, err
	}
	p.conn.Conn = c
	return p.conn, nil
}

type countingConn struct {
	redsyncredis.Conn
	locker *redsyncLocker
}

func (c *countingConn) SetNX(name, value string, expiry time.Duration) (bool, error) {
	ok, err := c.Conn.SetNX(name, value, expiry)
	c.locker.calls.Add(1)
	if ok {
		c.locker.won.Add(1)
	}
	return ok, err
}

// redsyncLost reports redsync's word that the lock was held elsewhere until
// Lock gave up: the row's "gave up", as ErrNotAcquired is redlock's.
func redsyncLost(err error) bool {
	var taken *redsync.ErrTaken
	var nodeTaken *redsync.ErrNodeTaken
	return errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) || errors.As(err, &nodeTaken)
}

// errRedsyncNotHeld is an Unlock that released no quorum without an error.
var errRedsyncNotHeld = errors.New("benchrun: redsync unlock released no quorum")

// redsyncHeld is a held redsync mutex as the contended loop releases it.
type redsyncHeld struct{ m *redsync.Mutex }

func (h redsyncHeld) Unlock(ctx context.Context) error {
	ok, err := h.m.UnlockContext(ctx)
	if !ok && err == nil {
		err = errRedsyncNotHeld
	}
	return err
}
