// Package chaosworld is one run of the chaos suite without its fault: the lock masters
// (redis-servers on loopback, started as the fault asks, behind fault proxies if it asks),
// the fence counter, the fenced store and the worker processes, with what the workers report;
// and the probes that verify that a fault took effect. It starts everything in a temporary dir
// of its own and stops it by pid, last first; it never touches servers it did not start. Which
// fault is injected, and what must hold while it lasts, is package chaos's.
package chaosworld

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"quorumlock.dev/cmd/redlock-bench/internal/chaoscheck"
	"quorumlock.dev/cmd/redlock-bench/internal/chaosstore"
	"quorumlock.dev/cmd/redlock-bench/internal/chaosworker"
	"quorumlock.dev/internal/harness/faultproxy"
	"quorumlock.dev/internal/harness/redisserver"
)

// Spec is what a run is made of.
type Spec struct {
	Masters     int           // lock masters
	NodeTimeout time.Duration // the workers' per-master timeout
	Retry       time.Duration // the longest pause of a worker after a lost attempt
	Workers     int           // worker processes
	Loops       int           // goroutines taking locks in each worker
	Resources   int           // resources the workers compete for
	TTL, Hold   time.Duration // the locks' TTL, and how long a holder stays inside
	Proxied     bool          // masters behind fault proxies
	Guard       bool          // the workers' clients run redlock.WithRestartGuard

	// Store is the fenced store; the zero Spec: in memory.
	Store chaosstore.Spec

	// The leader scenarios: workers campaign for one role and relay while they lead
	// (chaosworker.Config's Leader and ResignEvery).
	Leader        bool
	ResignEvery   int
	WorkerProxies bool // each worker reaches the masters through fault proxies of its own
}

// World is one run: the masters, the fence counter, the store, the workers, and what the
// workers said. A fault may start master i itself before [World.Start], by setting Masters[i].
type World struct {
	Spec Spec
	Dir  string // the servers' dirs and the workers' logs

	Servers []*redisserver.Server // the masters' processes; an entry may be nil (a master under Sentinel)
	Proxies []*faultproxy.Proxy   // nil unless Spec.Proxied
	// WorkerProxies[id][i] is worker id's way to master i, with Spec.WorkerProxies.
	WorkerProxies [][]*faultproxy.Proxy
	Masters       []chaosworker.Master // how workers reach each master
	Direct        []string             // each master's own address, for the majority check
	Counter       *redisserver.Server
	Store         *chaosstore.Store
	Workers       []*chaosworker.Proc // by worker id
	Rec           *chaosworker.Recorder

	cleanup []func()
}

// New makes a run's dir, named for the scenario; [World.Close] removes it.
func New(name string, spec Spec) (*World, error) {
	dir, err := os.MkdirTemp("", "chaos-"+name+"-")
	if err != nil {
		return nil, err
	}
	return &World{Spec: spec, Dir: dir, Rec: chaosworker.NewRecorder()}, nil
}

// AddCleanup registers f for [World.Close], which runs the last registered first.
func (w *World) AddCleanup(f func()) { w.cleanup = append(w.cleanup, f) }

// Close stops everything the run started, last first, and removes its dir unless keep (the
// run failed, and its logs say why).
func (w *World) Close(keep bool) {
	for _, wp := range w.Workers {
		wp.Kill()
	}
	for i := len(w.cleanup) - 1; i >= 0; i-- {
		w.cleanup[i]()
	}
	if !keep {
		_ = os.RemoveAll(w.Dir)
	}
}

// Start starts the masters a fault has not started itself, master i with server(i)'s
// options, then the fence counter, the store and the workers, and returns once they are warm:
// every worker has had an attempt answered by the masters (won, or refused because another
// holds the resource), so its client is connected, and locks are being won (at least two; with
// Spec.Leader, every worker has dialled the masters and a leader was elected).
func (w *World) Start(ctx context.Context, server func(i int) redisserver.Options) error {
	if err := w.startMasters(ctx, server); err != nil {
		return err
	}
	var err error
	if w.Counter, err = w.startRedis(ctx, "counter", redisserver.Options{}); err != nil {
		return err
	}
	if w.Store, err = chaosstore.Start(ctx, w.Spec.Store, resources(w.Spec.Resources)); err != nil {
		return err
	}
	w.AddCleanup(w.Store.Close)
	for i := range w.Spec.Workers {
		if err := w.startWorker(i); err != nil {
			return err
		}
	}
	// Not two locks per worker: with one resource and holds of 70% of a TTL, that is six
	// holds in a row (at least 21 s in the failover scenario), and a refused attempt shows a
	// connected client as well as a won one.
	won := 2
	if w.Spec.Leader {
		won = 1 // a leader that never resigns holds its one term until the fault
	}
	warm := func() bool { return w.Rec.Answered() == w.Spec.Workers && w.Rec.Acquisitions() >= won }
	if !WaitUntil(30*time.Second, func() bool { return warm() || ctx.Err() != nil }) {
		return fmt.Errorf("%d of %d workers answered and %d locks won in 30 s of warm-up", w.Rec.Answered(), w.Spec.Workers, w.Rec.Acquisitions())
	}
	return nil
}

// Stop tells the workers to finish, one after another, kills those that have not a TTL and
// 2 s later, and returns what they recorded, with what the store holds.
func (w *World) Stop(ctx context.Context) (chaoscheck.History, chaosworker.Summary, error) {
	// Not all at once, though it would be faster under the race detector (a process sleeps a
	// second as it exits): the healthy attempts of the workers told last count in the spare
	// that judges allow for a quorum missed on a loaded machine.
	for _, wp := range w.Workers {
		wp.Stop(w.Spec.TTL + 2*time.Second)
	}
	final, err := w.Store.Final(ctx)
	if err != nil {
		return chaoscheck.History{}, chaosworker.Summary{}, err
	}
	return w.Rec.History(final), w.Rec.Summary(), nil
}

// startRedis starts a redis-server in the run's dir, stopped by Close.
func (w *World) startRedis(ctx context.Context, name string, opt redisserver.Options) (*redisserver.Server, error) {
	opt.Dir = filepath.Join(w.Dir, name)
	s, err := redisserver.Start(ctx, opt)
	if err != nil {
		return nil, err
	}
	w.AddCleanup(func() { _ = s.Stop() })
	return s, nil
}

func (w *World) startMasters(ctx context.Context, server func(i int) redisserver.Options) error {
	n := w.Spec.Masters
	if w.Servers == nil {
		w.Servers = make([]*redisserver.Server, n)
	}
	if w.Masters == nil {
		w.Masters = make([]chaosworker.Master, n)
		w.Direct = make([]string, n)
	}
	for i := range n {
		if w.Masters[i].Addr != "" || len(w.Masters[i].Sentinels) > 0 {
			continue
		}
		s, err := w.startRedis(ctx, fmt.Sprintf("master%d", i), server(i))
		if err != nil {
			return err
		}
		w.Servers[i] = s
		w.Masters[i] = chaosworker.Master{Addr: s.Addr()}
		w.Direct[i] = s.Addr()
	}
	if w.Spec.Proxied {
		w.Proxies = make([]*faultproxy.Proxy, n)
		for i := range n {
			p, err := faultproxy.New(w.Masters[i].Addr)
			if err != nil {
				return err
			}
			w.AddCleanup(func() { _ = p.Close() })
			w.Proxies[i] = p
			w.Masters[i].Addr = p.Addr()
		}
	}
	return nil
}

// AddWorker starts one more worker, with the next id, as Start started the others.
func (w *World) AddWorker() error { return w.startWorker(len(w.Workers)) }

func (w *World) startWorker(id int) error {
	masters := w.Masters
	if w.Spec.WorkerProxies {
		masters = make([]chaosworker.Master, len(w.Masters))
		proxies := make([]*faultproxy.Proxy, len(w.Masters))
		for i, m := range w.Masters {
			p, err := faultproxy.New(m.Addr)
			if err != nil {
				return err
			}
			w.AddCleanup(func() { _ = p.Close() })
			proxies[i], masters[i] = p, chaosworker.Master{Addr: p.Addr()}
		}
		w.WorkerProxies = append(w.WorkerProxies, proxies)
	}
	cfg := chaosworker.Config{
		ID: id, Masters: masters, Direct: w.Direct, Counter: w.Counter.Addr(), Addr: w.Store.Addr(),
		Resources: resources(w.Spec.Resources), TTL: w.Spec.TTL, NodeTimeout: w.Spec.NodeTimeout,
		Hold: w.Spec.Hold, Retry: w.Spec.Retry, Loops: w.Spec.Loops, Guard: w.Spec.Guard,
		Leader: w.Spec.Leader, ResignEvery: w.Spec.ResignEvery,
	}
	wp, err := chaosworker.Start(w.Dir, cfg, w.Rec)
	if err != nil {
		return err
	}
	w.Workers = append(w.Workers, wp)
	return nil
}

func resources(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("chaos:R%d", i)
	}
	return out
}
