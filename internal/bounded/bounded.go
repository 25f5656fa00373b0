// Package bounded runs a call to a Redis node within a time limit whether
// or not the node's client honours its context: the fence counter and
// Check share it.
package bounded

import (
	"context"
	"fmt"
	"sync"
	"time"
)

type answer[T any] struct {
	v   T
	err error
}

// Call returns call(ctx, arg), or gives up after limit (no limit when 0)
// or when ctx ends. A driver may not honour a context deadline (go-redis
// reads only with ContextTimeoutEnabled), so the bound is enforced here, with the
// call on a goroutine of its own. A call given up keeps running and its answer
// is dropped: the server may still execute the command.
//
// call and arg come apart, rather than as one closure, so that the
// goroutine's closure is the only one allocated.
func Call[A, T any](ctx context.Context, limit time.Duration, call func(context.Context, A) (T, error), arg A) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	if limit <= 0 && ctx.Done() == nil {
		// Nothing could end the wait early.
		return call(ctx, arg)
	}
	// The call's own context carries the limit too, so that go-redis's wait
	// for a pooled connection, which honours it, ends in time: without it,
	// calls to a hung node would pile up behind its pool.
	cctx, cancel := ctx, context.CancelFunc(func() {})
	if limit > 0 {
		cctx, cancel = context.WithTimeout(ctx, limit)
	}
	ch := make(chan answer[T], 1)
	go func() {
		defer cancel()
		v, err := call(cctx, arg)
		ch <- answer[T]{v, err}
	}()
	select {
	case a := <-ch:
		return a.v, a.err
	case <-cctx.Done():
		select {
		case a := <-ch: // the call returned, and its goroutine ended cctx after sending
			return a.v, a.err
		default:
		}
		if err := ctx.Err(); err != nil {
			return zero, err
		}
		return zero, fmt.Errorf("no answer within %v: %w", limit, context.DeadlineExceeded)
	}
}

// Wait waits for wg, at most until by: what an owner's Close does with
// the goroutines it started, so that a goroutine stuck on a hung server
// does not hold Close past its bound (it ends in the background).
func Wait(wg *sync.WaitGroup, by time.Time) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(time.Until(by))
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}
