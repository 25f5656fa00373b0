package benchrun

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"quorumlock.dev/cmd/redlock-bench/internal/progress"
	"quorumlock.dev/driver"
	"quorumlock.dev/internal/harness/critical"
	"quorumlock.dev/redlock"
)

// rawRelease is the least a release can be: delete the key if it holds our
// token. (The lock's own script also serves its waiters.)
var rawRelease = driver.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end return 0`)

// rawLoop is the baseline of the healthy scenario: the least a Redlock
// client has to do through a driver, with nothing of the lock's own. SET NX
// PX on every master at once, done at a majority; release with a
// compare-and-delete on every master, waiting for all. Each round is bounded
// by one node timeout. No validity, no retry, no breaker, no undo of a late
// SET beyond the release round, no error detail.
type rawLoop struct {
	masters     []driver.Conn
	nodeTimeout time.Duration
}

// rawHold is a lock the raw loop took: its token, and the end of the
// acquire round's context, which unlock calls once every master released.
type rawHold struct {
	token string
	done  context.CancelFunc
}

// tryLock takes key's lock on a majority, or releases what it took and
// fails with redlock.ErrNotAcquired (a master had the key) or
// redlock.ErrQuorumUnavailable (masters did not answer in time).
func (r *rawLoop) tryLock(ctx context.Context, key string, ttl time.Duration) (rawHold, error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	n := len(r.masters)
	need := n/2 + 1
	actx, cancel := context.WithTimeout(ctx, r.nodeTimeout)
	type answer struct {
		ok  bool
		err error
	}
	answers := make(chan answer, n)
	for _, m := range r.masters {
		go func() {
			ok, err := m.SetNX(actx, key, token, ttl)
			answers <- answer{ok, err}
		}()
	}
	won, refused, failed := 0, 0, 0
	for range n {
		a := <-answers
		switch {
		case a.err != nil:
			failed++
		case a.ok:
			won++
		default:
			refused++
		}
		if won >= need || refused+failed > n-need {
			break
		}
	}
	if won >= need {
		// The late SETs go on under actx until the release round.
		return rawHold{token, cancel}, nil
	}
	_ = r.unlock(ctx, key, rawHold{token, cancel})
	if refused > 0 {
		return rawHold{}, redlock.ErrNotAcquired
	}
	return rawHold{}, fmt.Errorf("%w: %d of %d masters failed", redlock.ErrQuorumUnavailable, failed, n)
}

// unlock releases key on every master and waits for all of them; it fails
// when any release failed.
func (r *rawLoop) unlock(ctx context.Context, key string, h rawHold) error {
	defer h.done()
	ctx, cancel := context.WithTimeout(ctx, r.nodeTimeout)
	defer cancel()
	keys := []string{key}
	errs := make([]error, len(r.masters))
	var wg sync.WaitGroup
	for i, m := range r.masters {
		wg.Go(func() { _, errs[i] = m.Eval(ctx, rawRelease, keys, h.token) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// runRaw is [worker.run] for the raw quorum loop.
func (w *worker) runRaw(ctx context.Context, cfg Config, v *variant, end time.Time, counted bool, left *atomic.Int64, invalid *atomic.Pointer[error], bar *progress.Bar) {
	for w.more(ctx, counted, left, end) {
		key := "lock:" + v.resources[w.rng.IntN(len(v.resources))]
		start := time.Now()
		h, err := v.raw.tryLock(ctx, key, cfg.TTL)
		w.record(time.Since(start), bar)
		if err != nil {
			if !w.failed(ctx, err, invalid) {
				return
			}
			continue
		}
		if cfg.Hold > 0 {
			critical.Hold(cfg.Hold)
		}
		if err := v.raw.unlock(ctx, key, h); err != nil {
			w.errored(err)
			continue
		}
		_ = w.cycle.RecordValue(micros(time.Since(start)))
		w.acquired++
	}
}
