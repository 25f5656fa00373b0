package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/redlock/check"
)

func TestOutcomeWords(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want string
	}{
		{nil, "acquired"},
		{ErrNotAcquired, "not_acquired"},
		{errors.Join(ErrNotAcquired, ErrVotesSplit), "not_acquired"},
		{fmt.Errorf("x: %w", ErrQuorumUnavailable), "quorum_unavailable"},
		{errors.Join(ErrFenceUnavailable, errors.New("counter down")), "fence_unavailable"},
		{fmt.Errorf("%w: replica", check.ErrUnsafe), "unsafe_config"},
		{fmt.Errorf("redlock: not attempted: %w", context.Canceled), "cancelled"},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), "cancelled"},
		// A round the caller's context cut short: what the masters said first.
		{errors.Join(ErrNotAcquired, context.DeadlineExceeded), "not_acquired"},
		{errors.Join(ErrQuorumUnavailable, context.DeadlineExceeded), "quorum_unavailable"},
		{ErrWrongType, "error"},
	} {
		assert.Equal(t, tt.want, acquireOutcome(tt.err), "%v", tt.err)
	}
	for _, tt := range []struct {
		err  error
		want string
	}{
		{nil, "extended"},
		{ErrLockNotHeld, "not_held"},
		{errors.Join(ErrQuorumUnavailable, ErrLockNotHeld), "quorum_unavailable"},
		{fmt.Errorf("redlock: Extend not attempted: %w", context.Canceled), "cancelled"},
		{errors.New("redlock: extend script replied x"), "error"},
	} {
		assert.Equal(t, tt.want, extendOutcome(tt.err), "%v", tt.err)
	}
	assert.Equal(t, "released", releaseOutcome(nil))
	assert.Equal(t, "not_held", releaseOutcome(fmt.Errorf("%w: already unlocked", ErrLockNotHeld)))
	for _, tt := range []struct {
		cause error
		want  string
	}{
		{errUnlocked, "unlocked"},
		{errLeaseRanOut, "lease_ran_out"},
		{fmt.Errorf("%w: renewal: %w", ErrLockLost, ErrNoProgress), "no_progress"},
		{fmt.Errorf("%w: renewal: %w", ErrLockLost, ErrMaxHold), "max_hold"},
		{fmt.Errorf("%w: Extend failed: %w", ErrLockLost, ErrLockNotHeld), "extend_failed"},
	} {
		assert.Equal(t, tt.want, holdOutcome(tt.cause), "%v", tt.cause)
	}
}

type ctxMark struct{}

// hookLog records, for each hook, the ctxMark of the contexts it was given
// and the events it heard.
type hookLog struct {
	mu     sync.Mutex
	marks  map[string][]any
	events map[string][]Event
}

func (h *hookLog) add(hook string, ctx context.Context, e *Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ctx != nil {
		h.marks[hook] = append(h.marks[hook], ctx.Value(ctxMark{}))
	}
	if e != nil {
		h.events[hook] = append(h.events[hook], *e)
	}
}

func (h *hookLog) get(hook string) ([]any, []Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]any(nil), h.marks[hook]...), append([]Event(nil), h.events[hook]...)
}

// hooks are Hooks that record into h. Acquire marks the context it returns
// with "acquire "+resource.
func (h *hookLog) hooks() Hooks {
	end := func(hook string) func(Event) { return func(e Event) { h.add(hook, nil, &e) } }
	return Hooks{
		Acquire: func(ctx context.Context, resource string) (context.Context, func(Event)) {
			h.add("acquire", ctx, nil)
			return context.WithValue(ctx, ctxMark{}, "acquire "+resource), end("acquire")
		},
		Attempt: func(ctx context.Context, e Event) { h.add("attempt", ctx, &e) },
		Vote:    func(ctx context.Context, e Event) { h.add("vote", ctx, &e) },
		Hold: func(ctx context.Context, resource string) func(Event) {
			h.add("hold", ctx, nil)
			return end("hold")
		},
		Extend: func(ctx context.Context, resource string) func(Event) {
			h.add("extend", ctx, nil)
			return end("extend")
		},
		Wait: func(ctx context.Context, resource string) func(Event) {
			h.add("wait", ctx, nil)
			return end("wait")
		},
		Release: func(ctx context.Context, resource string) func(Event) {
			h.add("release", ctx, nil)
			return end("release")
		},
	}
}

func newHookLog() *hookLog {
	return &hookLog{marks: map[string][]any{}, events: map[string][]Event{}}
}

// The start hooks get the caller's context, and the attempts, votes and
// hold of a call get the context its Acquire returned, so that a tracer's
// spans of a contended acquisition join the caller's trace; Acquire's end
// tells the attempts the call ran and the lease it got.
func TestHooksCarryTheContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, masters := memMasters(3)
		log := newHookLog()
		c := virtualClient(t, masters, WithHooks(log.hooks()))
		ctx := context.WithValue(context.Background(), ctxMark{}, "caller")
		holder, err := c.TryLock(ctx, "job", time.Minute)
		require.NoError(t, err)
		waiter := lockAsync(ctx, c, "job", time.Minute)
		time.Sleep(time.Second)
		synctest.Wait()
		require.NoError(t, holder.Unlock(ctx))
		r := <-waiter
		require.NoError(t, r.err)
		require.NoError(t, r.l.Extend(ctx, time.Minute))
		require.NoError(t, r.l.Unlock(ctx))
		synctest.Wait() // the votes of the masters a round did not wait for

		marks, acquired := log.get("acquire")
		assert.Equal(t, []any{"caller", "caller"}, marks, "Acquire is given the caller's context")
		require.Len(t, acquired, 2)
		assert.Equal(t, "acquired", acquired[0].Outcome)
		assert.Equal(t, 1, acquired[0].Attempts)
		assert.Equal(t, c.lease(time.Minute), acquired[0].Validity, "no virtual time passed in the round")
		assert.Equal(t, "acquired", acquired[1].Outcome)
		assert.GreaterOrEqual(t, acquired[1].Attempts, 2, "the waiter lost, then won")
		assert.GreaterOrEqual(t, acquired[1].Took, time.Second, "the waiter's call lasted its wait")
		for _, hook := range []string{"attempt", "vote", "hold", "wait"} {
			marks, _ := log.get(hook)
			require.NotEmpty(t, marks, hook)
			for _, m := range marks {
				assert.Equal(t, "acquire job", m, "%s is not given the context Acquire returned", hook)
			}
		}
		_, attempts := log.get("attempt")
		assert.Len(t, attempts, 1+acquired[1].Attempts)
		_, waits := log.get("wait")
		require.Len(t, waits, acquired[1].Attempts-1, "a wait after each lost attempt")
		assert.ErrorIs(t, waits[0].Err, ErrNotAcquired, "the wait says why: a holder")
		var waited time.Duration
		for _, w := range waits {
			assert.Equal(t, "woke", w.Outcome)
			waited += w.Took
		}
		assert.GreaterOrEqual(t, waited, time.Second, "the waiter's waits cover the holder's second")
		_, votes := log.get("vote")
		assert.Len(t, votes, 3*len(attempts), "a vote per master and attempt")
		marks, extended := log.get("extend")
		assert.Equal(t, []any{"caller"}, marks, "Extend is given the caller's context")
		require.Len(t, extended, 1)
		assert.Equal(t, "extended", extended[0].Outcome)
		marks, releases := log.get("release")
		assert.Equal(t, []any{"caller", "caller"}, marks, "Release is given the caller's context")
		require.Len(t, releases, 2)
		for _, r := range releases {
			assert.Equal(t, "released", r.Outcome)
		}
		_, held := log.get("hold")
		require.Len(t, held, 2)
		assert.Equal(t, Event{Outcome: "unlocked", Took: time.Second}, held[0], "the holder's hold: a second, then Unlock")
		assert.Equal(t, "unlocked", held[1].Outcome)
	})
}

// An Unlock after the lease ran out tells the Release hook not_held.
func TestReleaseHookNotHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, masters := memMasters(3)
		log := newHookLog()
		c := virtualClient(t, masters, WithHooks(log.hooks()))
		l, err := c.TryLock(context.Background(), "job", time.Second)
		require.NoError(t, err)
		time.Sleep(2 * time.Second)
		err = l.Unlock(context.Background())
		require.ErrorIs(t, err, ErrLockNotHeld)
		_, releases := log.get("release")
		require.Len(t, releases, 1)
		assert.Equal(t, "not_held", releases[0].Outcome)
		assert.ErrorIs(t, releases[0].Err, ErrLockNotHeld)
	})
}

// A Lock call whose context ends while it waits tells the Wait hook so.
func TestWaitHookEnded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, masters := memMasters(3)
		log := newHookLog()
		c := virtualClient(t, masters, WithHooks(log.hooks()))
		holder, err := c.TryLock(context.Background(), "job", time.Minute)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err = c.Lock(ctx, "job", time.Minute)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		_, waits := log.get("wait")
		require.NotEmpty(t, waits)
		last := waits[len(waits)-1]
		assert.Equal(t, "ended", last.Outcome)
		assert.ErrorIs(t, last.Err, ErrNotAcquired)
		require.NoError(t, holder.Unlock(context.Background()))
	})
}

// Each way a lock ends is told to the Hold hook once, before Done closes,
// whether or not the holder watches the lock.
func TestHoldEnds(t *testing.T) {
	for _, tt := range []struct {
		name    string
		end     func(t *testing.T, l *Lock, servers func(key string))
		outcome string
		cause   error
		renewed bool
	}{
		{"Unlock", func(t *testing.T, l *Lock, _ func(string)) {
			time.Sleep(100 * time.Millisecond)
			require.NoError(t, l.Unlock(context.Background()))
		}, "unlocked", nil, false},
		{"the lease ran out, unwatched", func(t *testing.T, l *Lock, _ func(string)) {
			time.Sleep(2 * time.Second)
		}, "lease_ran_out", ErrLockLost, false},
		{"an Extend failed", func(t *testing.T, l *Lock, del func(string)) {
			del("lock:job")
			time.Sleep(100 * time.Millisecond)
			require.ErrorIs(t, l.Extend(context.Background(), time.Second), ErrLockNotHeld)
		}, "extend_failed", ErrLockLost, false},
		{"the renewer saw no progress", func(t *testing.T, l *Lock, _ func(string)) {
			require.NoError(t, l.Renew(time.Second, time.Minute))
			time.Sleep(2 * time.Second)
		}, "no_progress", ErrNoProgress, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				servers, masters := memMasters(3)
				var (
					mu        sync.Mutex
					ends      []Event
					doneAtEnd []bool
					done      <-chan struct{}
				)
				c := virtualClient(t, masters, WithHooks(Hooks{Hold: func(context.Context, string) func(Event) {
					return func(e Event) {
						mu.Lock()
						defer mu.Unlock()
						ends = append(ends, e)
						select {
						case <-done:
							doneAtEnd = append(doneAtEnd, true)
						default:
							doneAtEnd = append(doneAtEnd, false)
						}
					}
				}}))
				l, err := c.TryLock(context.Background(), "job", time.Second)
				require.NoError(t, err)
				if tt.outcome != "lease_ran_out" { // that one nobody watches: the hook's own timer ends it
					mu.Lock()
					done = l.Done()
					mu.Unlock()
				}
				tt.end(t, l, func(key string) {
					for _, s := range servers {
						s.Del(key)
					}
				})
				synctest.Wait()
				mu.Lock()
				defer mu.Unlock()
				require.Len(t, ends, 1)
				e := ends[0]
				assert.Equal(t, tt.outcome, e.Outcome)
				assert.Equal(t, tt.renewed, e.Renewed)
				if tt.cause == nil {
					assert.NoError(t, e.Err)
				} else {
					assert.ErrorIs(t, e.Err, tt.cause)
				}
				assert.Positive(t, e.Took)
				assert.LessOrEqual(t, e.Took, c.lease(time.Second), "held past its lease")
				assert.Equal(t, []bool{false}, doneAtEnd, "told after Done closed")
				mu.Unlock()
				_ = l.Unlock(context.Background())
				synctest.Wait()
				mu.Lock()
				assert.Len(t, ends, 1, "told twice")
			})
		})
	}
}

// An Acquire that returns no context leaves the caller's to the rest; a
// LockAll is named by its resources joined with commas; Event.Fence is the
// first resource's fence under WithFence, and 0 without.
func TestAcquireHookDetails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, masters := memMasters(3)
		log := newHookLog()
		var names []string
		hooks := log.hooks()
		hooks.Acquire = func(ctx context.Context, resource string) (context.Context, func(Event)) {
			names = append(names, resource)
			return nil, func(e Event) { log.add("acquire", nil, &e) }
		}
		minter := &countingMinter{}
		minter.next.Store(41)
		fenced := virtualClient(t, masters, WithHooks(hooks), WithFence(minter))
		ctx := context.WithValue(context.Background(), ctxMark{}, "caller")
		l, err := fenced.LockAll(ctx, []string{"job:{b}:2", "job:{b}:1"}, time.Minute)
		require.NoError(t, err)
		fences, _ := l.Fences()
		require.NoError(t, l.Unlock(ctx))
		plain := virtualClient(t, masters, WithHooks(hooks))
		l, err = plain.TryLock(ctx, "job", time.Minute)
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
		synctest.Wait()

		assert.Equal(t, []string{"job:{b}:2,job:{b}:1", "job"}, names)
		marks, _ := log.get("attempt")
		assert.Equal(t, []any{"caller", "caller"}, marks, "an Acquire without a context took the caller's away")
		_, acquired := log.get("acquire")
		require.Len(t, acquired, 2)
		assert.Equal(t, []uint64{42, 43}, fences)
		assert.Equal(t, uint64(42), acquired[0].Fence)
		assert.Zero(t, acquired[1].Fence)
	})
}
