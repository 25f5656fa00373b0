package leadership

import (
	"context"
	"errors"
	"sync"
	"time"

	"quorumlock.dev/driver"
)

// Observe returns a channel that receives who leads the role (the zero Info
// when nobody does) at the first read that succeeds, then at each change,
// until ctx ends; it is then closed. It reads [Election.Leader] when a
// master pushes a change (a term that starts or ends publishes on the
// record's key, to masters that can subscribe) and every observe interval
// otherwise: the end of a leader that died is seen within one interval of
// its keys' expiry. Its goroutines (one, plus one per subscribing master)
// end with ctx; a receiver that does not keep up holds them, not the
// election. Reads that fail keep the last value.
func (e *Election) Observe(ctx context.Context) <-chan Info {
	out := make(chan Info)
	wake := make(chan struct{}, 1)
	var subs sync.WaitGroup
	var closers []func() error
	for _, m := range e.masters {
		s, ok := m.(driver.Subscriber)
		if !ok {
			continue
		}
		sub := s.Subscribe(ctx)
		closers = append(closers, sub.Close)
		subs.Go(func() { e.listen(ctx, sub, wake) })
	}
	go func() {
		defer close(out)
		defer subs.Wait()
		defer func() {
			for _, c := range closers {
				_ = c() // ends a Receive that waits
			}
		}()
		timer := time.NewTimer(0)
		defer timer.Stop()
		var last Info
		first := true
		for {
			select {
			case <-ctx.Done():
				return
			case <-wake:
			case <-timer.C:
			}
			timer.Reset(e.cfg.observeEvery)
			info, err := e.Leader(ctx)
			if err != nil && (!errors.Is(err, ErrNoLeader) || ctx.Err() != nil || !allReplied(err)) {
				continue
			}
			if !first && info == last {
				continue
			}
			select {
			case out <- info:
				last, first = info, false
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// allReplied reports an ErrNoLeader that no master's failure caused: nobody
// leads, as opposed to "could not tell".
func allReplied(err error) bool {
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) {
		return true
	}
	return len(joined.Unwrap()) == 1
}

// listen turns the messages of one master's subscription into wake-ups. A
// lost connection is subscribed again after an observe interval; polling
// covers the gap.
func (e *Election) listen(ctx context.Context, sub driver.Subscription, wake chan<- struct{}) {
	subscribed := false
	for ctx.Err() == nil {
		if !subscribed {
			cctx, cancel := context.WithTimeout(ctx, e.cfg.nodeTimeout)
			err := sub.Subscribe(cctx, e.recordKey)
			cancel()
			if err != nil {
				e.pause(ctx)
				continue
			}
			subscribed = true
		}
		if _, err := sub.Receive(ctx); err != nil {
			subscribed = false
			e.pause(ctx)
			continue
		}
		select {
		case wake <- struct{}{}:
		default: // a read is due already
		}
	}
}

func (e *Election) pause(ctx context.Context) {
	t := time.NewTimer(e.cfg.observeEvery)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
