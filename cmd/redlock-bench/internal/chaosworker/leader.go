package chaosworker

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"quorumlock.dev/cmd/redlock-bench/internal/chaoscheck"
	"quorumlock.dev/driver"
	"quorumlock.dev/leadership"
	"quorumlock.dev/redlock"
)

// TermEnd is how a leader's term ended, as its worker saw it.
type TermEnd struct {
	Worker int    `json:"worker"`
	Fence  uint64 `json:"fence"`
	At     int64  `json:"at"`    // Unix ns: the call to Resign, or when the worker saw the term's context end
	Cause  string `json:"cause"` // Resigned, Stopped, FencedOut, or the context's cause
}

// The causes of a TermEnd that the worker chose.
const (
	Resigned  = "resigned"   // the worker resigned after Config.ResignEvery deliveries
	Stopped   = "stopped"    // the worker was told to stop, and resigned
	FencedOut = "fenced out" // the store refused the term's fence: a later term had written
)

// lead is a worker of the leader scenarios: an outbox relay. It campaigns for one role
// (Resources[0]); while it leads, it delivers the role's messages one after another, each a
// claim of the row with the term's fence (the next message's number) and, Hold later, the
// delivery, a fenced write of that number; it records Progress after each. Each term is a
// holding (resource: the role; Until: unbounded, Released: when the term ended); each end of a
// term is a term_end event.
func lead(ctx context.Context, cfg Config, client *redlock.Client, masters []driver.Conn, store *storeClient, out *emitter) error {
	role := cfg.Resources[0]
	e, err := leadership.New(client, role, leadership.WithTTL(cfg.TTL), leadership.WithIdentity(identity(cfg.ID)))
	if err != nil {
		return err
	}
	// One read of who leads dials every master: the worker is ready to campaign.
	rctx, cancel := context.WithTimeout(ctx, 10*cfg.NodeTimeout)
	_, _ = e.Leader(rctx)
	cancel()
	out.emit(event{Kind: "ready"})
	for ctx.Err() == nil {
		start := time.Now()
		term, err := e.Campaign(ctx)
		if err != nil && ctx.Err() != nil {
			break
		}
		ev := event{Kind: "attempt", Latency: int64(time.Since(start)), At: time.Now().UnixNano(), Result: outcome(err)}
		if err != nil {
			ev.Err = err.Error()
		}
		out.emit(ev)
		if err != nil {
			sleep(ctx, rand.N(cfg.Retry+1))
			continue
		}
		if relay(ctx, cfg, term, store, out) == Resigned {
			awaitOther(ctx, cfg, e)
		}
	}
	return nil
}

func identity(worker int) string { return fmt.Sprintf("worker%d", worker) }

// awaitOther waits, after a resignation, until another candidate leads (at most 10 TTLs), so
// that the next term is another worker's: the handover is then timed on the candidates that
// were waiting, woken by the release, and not on this worker's return.
func awaitOther(ctx context.Context, cfg Config, e *leadership.Election) {
	me := identity(cfg.ID)
	deadline := time.Now().Add(10 * cfg.TTL)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		rctx, cancel := context.WithTimeout(ctx, 10*cfg.NodeTimeout)
		info, err := e.Leader(rctx)
		cancel()
		if err == nil && info.Identity != me {
			return
		}
		sleep(ctx, 20*time.Millisecond)
	}
}

// relay delivers messages in term until the term ends, the store refuses its fence, it has
// delivered ResignEvery messages, or ctx ends; then it resigns, and returns why the term ended
// (the Cause of its TermEnd).
func relay(ctx context.Context, cfg Config, term *leadership.Term, store *storeClient, out *emitter) string {
	f := term.Fence()
	now := time.Now()
	h := chaoscheck.Holding{
		Worker: cfg.ID, Resource: term.Role(), Fence: f, Token: fmt.Sprintf("term:%d:%d", cfg.ID, f),
		Acquired: now.UnixNano(), Until: math.MaxInt64,
	}
	out.emit(event{Kind: "hold", Holding: &h, Majority: -1})
	// The end of the term as the worker sees it: a paused worker sees it when it runs again.
	var endedAt int64 // written before seen closes, or by end itself
	seen := make(chan struct{})
	ended := func() {
		endedAt = time.Now().UnixNano()
		h := h
		h.Released = endedAt
		out.emit(event{Kind: "hold", Holding: &h, Majority: -1})
	}
	stop := context.AfterFunc(term.Context(), func() { ended(); close(seen) })
	end := func(cause string) string {
		if stop() {
			ended() // the term is alive: it ends with this resignation, timed before the call
		} else {
			<-seen
		}
		out.emit(event{Kind: "term_end", Term: &TermEnd{Worker: cfg.ID, Fence: f, At: endedAt, Cause: cause}})
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.TTL)
		_ = term.Resign(rctx)
		cancel()
		return cause
	}
	for delivered := 0; ; delivered++ {
		switch {
		case ctx.Err() != nil:
			return end(Stopped)
		case term.Context().Err() != nil:
			return end(context.Cause(term.Context()).Error())
		case cfg.ResignEvery > 0 && delivered == cfg.ResignEvery:
			return end(Resigned)
		}
		next, ok := store.claim(out, term.Role(), f)
		if !ok {
			return end(FencedOut)
		}
		shadow, shadowOK := store.shadowRead(term.Role())
		sleep(ctx, cfg.Hold)
		// No look at the term here: a leader that paused wakes at any point, between a look
		// and the delivery too. The fence is what must refuse it.
		if !store.write(out, term.Role(), f, next) {
			if shadowOK {
				store.shadowWrite(term.Role(), shadow)
			}
			return end(FencedOut)
		}
		if shadowOK {
			store.shadowWrite(term.Role(), shadow)
		}
		term.Progress()
	}
}
