package wait

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/driver"
	"quorumlock.dev/quorum"
)

func base(waiting func(int)) *Base[*int] {
	return &Base[*int]{
		Config: Config{Delay: 50 * time.Millisecond, Jitter: 10 * time.Millisecond, Waiting: waiting, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		Rnd:    rand.New(rand.NewPCG(1, 2)),
	}
}

// TestRest: a sleep ends at its timer, at a lock handed over (returned at
// once), or at the end of ctx (the attempt's error joined with ctx's).
func TestRest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := base(nil)
		ctx := context.Background()
		start := time.Now()
		got, err := b.Rest(ctx, 30*time.Millisecond, nil, nil, nil, false, nil)
		require.NoError(t, err)
		assert.Nil(t, got)
		assert.Equal(t, 30*time.Millisecond, time.Since(start), "not woken by its timer")

		grant := make(chan *int, 1)
		mine := new(int)
		grant <- mine
		start = time.Now()
		got, err = b.Rest(ctx, time.Hour, nil, grant, nil, false, nil)
		require.NoError(t, err)
		assert.Same(t, mine, got, "the lock handed over was not returned")
		assert.Zero(t, time.Since(start))

		lost := errors.New("lost")
		cctx, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
		defer cancel()
		_, err = b.Rest(cctx, time.Hour, nil, nil, nil, false, lost)
		assert.ErrorIs(t, err, lost)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
	})
}

// TestWokeBacksOff: the first wake-up in a row goes to an attempt after
// first(); each next one waits a random part of a window that grows by
// WakeJitter per wake, up to MaxWakeBackoff; a sleep that ends at its
// timer starts the count again.
func TestWokeBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := base(nil)
		ctx := context.Background()
		wake := make(chan struct{}, 1)
		first := func() time.Duration { return 3 * time.Millisecond }
		rest := func() time.Duration {
			wake <- struct{}{}
			start := time.Now()
			_, err := b.Rest(ctx, time.Hour, wake, nil, first, false, nil)
			require.NoError(t, err)
			return time.Since(start)
		}
		assert.Equal(t, 3*time.Millisecond, rest(), "the first wake-up waits first()")
		for n := 2; n <= 40; n++ {
			window := min(time.Duration(n-1)*WakeJitter, MaxWakeBackoff)
			assert.Less(t, rest(), window, "wake-up %d", n)
		}
		_, err := b.Rest(ctx, time.Millisecond, wake, nil, first, false, nil)
		require.NoError(t, err)
		assert.Equal(t, 3*time.Millisecond, rest(), "a sleep to its timer did not start the count again")
		assert.Equal(t, 3*time.Millisecond, func() time.Duration {
			wake <- struct{}{}
			start := time.Now()
			_, _ = b.Rest(ctx, time.Hour, wake, nil, first, true, nil)
			return time.Since(start)
		}(), "a fresh wake-up is a first")
	})
}

// TestPollTellsWaitingOnce: the first Poll tells the Waiting hook that the
// call waits, once; Stop takes it back.
func TestPollTellsWaitingOnce(t *testing.T) {
	n := 0
	b := base(func(d int) { n += d })
	for range 3 {
		d := b.Poll()
		assert.GreaterOrEqual(t, d, 50*time.Millisecond)
		assert.Less(t, d, 60*time.Millisecond)
	}
	assert.Equal(t, 1, n)
	b.Stop()
	assert.Equal(t, 0, n)
}

// core is a Core whose breaker the test sets.
type core struct {
	Core[*int]
	stuck  error
	exited []error
}

func (c *core) Enter(context.Context, int) (bool, error) { return false, c.stuck }
func (c *core) Exit(_ context.Context, _ int, _ bool, err error) {
	c.exited = append(c.exited, err)
}
func (c *core) Master(int) driver.Conn { return nil }

// TestCall: a call the breaker holds back is not made; one that is made
// has its outcome recorded.
func TestCall(t *testing.T) {
	ctx := context.Background()
	c := &core{stuck: errors.New("stuck")}
	called := false
	_, err := Call(c, ctx, 0, func(context.Context, driver.Conn) (int, error) { called = true; return 1, nil })
	assert.ErrorIs(t, err, c.stuck)
	assert.False(t, called)
	assert.Empty(t, c.exited)

	c.stuck = nil
	failed := errors.New("failed")
	v, err := Call(c, ctx, 0, func(context.Context, driver.Conn) (int, error) { return 7, failed })
	assert.Equal(t, 7, v)
	assert.ErrorIs(t, err, failed)
	assert.Equal(t, []error{failed}, c.exited)
}

// replying is a master whose scripts all reply v.
type replying struct {
	driver.Conn
	v any
}

func (r replying) Eval(context.Context, *driver.Script, []string, ...any) (any, error) {
	return r.v, nil
}

// TestEvalTyped: a script's reply of the wrong type is
// driver.ErrUnexpectedReply.
func TestEvalTyped(t *testing.T) {
	ctx := context.Background()
	s := driver.NewScript("return 1")
	n, err := EvalInt(ctx, replying{v: int64(3)}, s, nil)
	assert.NoError(t, err)
	assert.Equal(t, int64(3), n)
	_, err = EvalInt(ctx, replying{v: "3"}, s, nil)
	assert.ErrorIs(t, err, driver.ErrUnexpectedReply)
	vals, err := EvalSlice(ctx, replying{v: []any{"a"}}, s, nil)
	assert.NoError(t, err)
	assert.Equal(t, []any{"a"}, vals)
	_, err = EvalSlice(ctx, replying{v: int64(1)}, s, nil)
	assert.ErrorIs(t, err, driver.ErrUnexpectedReply)
}

// TestRefused: a refusal counts whether it came in the round or after it.
func TestRefused(t *testing.T) {
	r := quorum.Settled([]bool{true, false})
	assert.False(t, Refused(r, 0))
	assert.True(t, Refused(r, 1))
}
