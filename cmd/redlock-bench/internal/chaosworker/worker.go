// Package chaosworker is the worker process of the chaos suite and the coordinator's handle on
// it. A worker is the coordinating program started again with its [Config] in the environment
// ([Env]); it takes locks on a few resources with redlock and a fence from a Redis counter
// (in the leader scenarios, it campaigns for a role with package leadership and relays while
// it leads: leader.go), writes through the fenced store of package chaosstore in each critical
// section, and reports every attempt, holding and store call as a JSON line on its stdout.
// [Start] starts one, and a [Recorder] collects what the workers report into a
// chaoscheck.History. It injects no fault: that is package chaos.
package chaosworker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"quorumlock.dev/cmd/redlock-bench/internal/chaoscheck"
	"quorumlock.dev/cmd/redlock-bench/internal/chaosstore"
	"quorumlock.dev/fence"
	"quorumlock.dev/redlock"

	"quorumlock.dev/driver"

	"quorumlock.dev/driver/goredis"
)

// Env is the environment variable that makes a program a chaos worker: its value is the
// worker's [Config] in JSON. A program that runs chaos scenarios calls [MaybeRun] first thing in
// main (or TestMain), since the workers are that same program started again.
const Env = "QUORUMLOCK_CHAOS_WORKER"

// MaybeRun runs the worker and exits when the process was started as one; otherwise it returns
// at once.
func MaybeRun() {
	spec := os.Getenv(Env)
	if spec == "" {
		return
	}
	var cfg Config
	if err := json.Unmarshal([]byte(spec), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "chaos worker:", err)
		os.Exit(2)
	}
	redis.SetLogger(silent{})
	if err := runWorker(context.Background(), cfg, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "chaos worker:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

type silent struct{}

func (silent) Printf(context.Context, string, ...any) {}

// Master is how a worker reaches one lock master: an address, or Sentinel's name for it.
type Master struct {
	Addr      string   `json:"addr,omitempty"`
	Sentinels []string `json:"sentinels,omitempty"`
	Name      string   `json:"name,omitempty"`
}

// Config is what the coordinator tells a worker.
type Config struct {
	ID      int      `json:"id"`
	Masters []Master `json:"masters"`
	Direct  []string `json:"direct"`  // the masters' own addresses, bypassing proxies, for the majority check ("" skips one)
	Counter string   `json:"counter"` // the fence counter's address
	chaosstore.Addr
	Resources   []string      `json:"resources"`
	TTL         time.Duration `json:"ttl"`
	NodeTimeout time.Duration `json:"node_timeout"`
	Hold        time.Duration `json:"hold"`          // the critical section, between claim and write
	Retry       time.Duration `json:"retry"`         // the longest pause after a lost attempt (uniform in [0, Retry])
	Loops       int           `json:"loops"`         // goroutines taking locks, each one at a time
	Guard       bool          `json:"restart_guard"` // redlock.WithRestartGuard, every GuardInterval

	// The leader scenarios: the worker is an outbox relay (see lead) instead of a lock taker.
	Leader      bool `json:"leader"`
	ResignEvery int  `json:"resign_every"` // resign after this many deliveries (0: never)
}

// GuardInterval is how often a guarded worker's client samples the masters: a small part of
// the TTL, so that a restarted master is out long before a TTL has passed.
const GuardInterval = 100 * time.Millisecond

// event is one line a worker writes to its stdout. Kind says which fields are set.
type event struct {
	Kind string `json:"ev"` // attempt, hold, call, ret, stats, ready, term_end

	// attempt
	Result  string `json:"result,omitempty"` // acquired, contended, unavailable, fence_unavailable, error
	Latency int64  `json:"lat,omitempty"`
	Err     string `json:"err,omitempty"`
	At      int64  `json:"at,omitempty"` // when the attempt returned (Unix ns)

	// hold
	Holding  *chaoscheck.Holding `json:"holding,omitempty"`
	Majority int                 `json:"majority,omitempty"` // masters found holding our token right after the win; -1: not checked

	// call and ret
	ID int            `json:"id,omitempty"`
	Op *chaoscheck.Op `json:"op,omitempty"`

	// stats
	Goroutines int    `json:"goroutines,omitempty"`
	HeapBytes  uint64 `json:"heap,omitempty"`

	// term_end (ready, a leader worker's word that it has dialled the masters, has no field)
	Term *TermEnd `json:"term,omitempty"`
}

// emitter writes events, one JSON line each, unbuffered, so that a process killed the next
// instant has already said what it did.
type emitter struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (e *emitter) emit(ev event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	_ = e.enc.Encode(ev)
}

// runWorker takes locks until stdin closes: one resource at a time, at random; in each
// critical section it claims the resource's row with its fence, holds, writes the next job,
// does the same on the shadow row without a fence, and releases.
func runWorker(ctx context.Context, cfg Config, stdin io.Reader, stdout io.Writer) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { // stdin closing is the word to stop
		_, _ = io.Copy(io.Discard, bufio.NewReader(stdin))
		stop()
	}()
	out := &emitter{enc: json.NewEncoder(stdout)}
	go reportStats(ctx, out)

	masters := make([]driver.Conn, len(cfg.Masters))
	for i, m := range cfg.Masters {
		masters[i] = dialMaster(m, cfg)
	}
	direct := make([]*redis.Client, len(cfg.Direct))
	for i, a := range cfg.Direct {
		if a != "" {
			// Reads bounded by the context: a partitioned master must not hold the check.
			direct[i] = redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1, PoolSize: 2, ContextTimeoutEnabled: true})
		}
	}
	counterNode := redis.NewClient(&redis.Options{Addr: cfg.Counter, MaxRetries: -1, DialTimeout: cfg.NodeTimeout * 4})
	counter, err := fence.NewRedisCounter(goredis.Conn(counterNode), fence.WithTimeout(cfg.NodeTimeout*4))
	if err != nil {
		return err
	}
	logger := slog.New(slog.DiscardHandler)
	opts := []redlock.Option{redlock.WithNodeTimeout(cfg.NodeTimeout), redlock.WithFence(counter), redlock.WithLogger(logger)}
	if cfg.Guard {
		opts = append(opts, redlock.WithRestartGuard(max(GuardInterval, cfg.NodeTimeout)))
	}
	if cfg.Leader {
		// Candidates queue: a release hands the role to the longest waiting one
		// alone, instead of waking them all to split the masters' votes.
		opts = append(opts, redlock.WithFairness(time.Second))
	}
	client, err := redlock.New(masters, opts...)
	if err != nil {
		return err
	}
	defer client.Close()
	b, err := chaosstore.Dial(ctx, cfg.Addr)
	if err != nil {
		return err
	}
	var seq atomic.Int64
	if cfg.Leader {
		return lead(ctx, cfg, client, masters, &storeClient{b: b, worker: cfg.ID, seq: &seq}, out)
	}
	var wg sync.WaitGroup
	for range max(cfg.Loops, 1) {
		wg.Go(func() { loop(ctx, cfg, client, direct, &storeClient{b: b, worker: cfg.ID, seq: &seq}, out) })
	}
	wg.Wait()
	return nil
}

func loop(ctx context.Context, cfg Config, client *redlock.Client, direct []*redis.Client, store *storeClient, out *emitter) {
	for ctx.Err() == nil {
		res := cfg.Resources[rand.IntN(len(cfg.Resources))]
		start := time.Now()
		l, err := client.TryLock(ctx, res, cfg.TTL)
		if err != nil && ctx.Err() != nil {
			break // cut short by the run's end: it says nothing of the masters
		}
		ev := event{Kind: "attempt", Latency: int64(time.Since(start)), At: time.Now().UnixNano(), Result: outcome(err)}
		if err != nil && ev.Result == "error" {
			ev.Err = err.Error()
		}
		out.emit(ev)
		if err != nil {
			sleep(ctx, rand.N(cfg.Retry+1))
			continue
		}
		critical(ctx, cfg, l, direct, store, out)
	}
}

// critical is one critical section of a held lock.
func critical(ctx context.Context, cfg Config, l *redlock.Lock, direct []*redis.Client, store *storeClient, out *emitter) {
	now := time.Now()
	f, _ := l.Fence()
	h := chaoscheck.Holding{
		Worker: cfg.ID, Resource: l.Resource(), Fence: f, Token: l.Token(),
		Acquired: now.UnixNano(), Until: now.Add(time.Until(l.Until())).UnixNano(),
	}
	out.emit(event{Kind: "hold", Holding: &h, Majority: majority(ctx, cfg, direct, l)})

	job, claimed := store.claim(out, l.Resource(), f)
	shadow, shadowOK := store.shadowRead(l.Resource())
	sleep(ctx, cfg.Hold)
	// No check of Until or Done here: a holder that paused can wake at any point, between the
	// check and the write too. The write is where the fence must hold.
	if claimed {
		store.write(out, l.Resource(), f, job)
	}
	if shadowOK {
		store.shadowWrite(l.Resource(), shadow)
	}

	h.Released = time.Now().UnixNano()
	out.emit(event{Kind: "hold", Holding: &h, Majority: -1})
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.TTL)
	_ = l.Unlock(uctx)
	cancel()
}

// majority counts the masters that hold l's token, asked directly right after the win, so that
// a grant without a real majority is seen. It returns -1 when masters that did not answer could
// make up the difference: only a definite shortfall counts.
func majority(ctx context.Context, cfg Config, direct []*redis.Client, l *redlock.Lock) int {
	if len(direct) == 0 {
		return -1
	}
	ctx, cancel := context.WithTimeout(ctx, 4*cfg.NodeTimeout)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	held, silent := 0, 0
	for _, c := range direct {
		if c == nil {
			silent++
			continue
		}
		wg.Go(func() {
			v, err := c.Get(ctx, "lock:"+l.Resource()).Result()
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && v == l.Token():
				held++
			case err != nil && !errors.Is(err, redis.Nil):
				silent++
			}
		})
	}
	wg.Wait()
	if q := len(direct)/2 + 1; held < q && held+silent >= q {
		return -1
	}
	return held
}

func outcome(err error) string {
	switch {
	case err == nil:
		return "acquired"
	case errors.Is(err, redlock.ErrFenceUnavailable):
		return "fence_unavailable"
	case errors.Is(err, redlock.ErrQuorumUnavailable):
		return "unavailable"
	case errors.Is(err, redlock.ErrNotAcquired):
		return "contended"
	default:
		return "error"
	}
}

func dialMaster(m Master, cfg Config) driver.Conn {
	if len(m.Sentinels) > 0 {
		return goredis.Conn(redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: m.Name, SentinelAddrs: m.Sentinels, MaxRetries: -1,
			DialTimeout: cfg.NodeTimeout * 4,
		}))
	}
	return goredis.Conn(redis.NewClient(&redis.Options{Addr: m.Addr, MaxRetries: -1, DialTimeout: cfg.NodeTimeout * 4}))
}

// reportStats says, every 100 ms, how many goroutines the worker runs and how much heap it
// holds: the overload scenario reports their peaks.
func reportStats(ctx context.Context, out *emitter) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	var m runtime.MemStats
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			runtime.ReadMemStats(&m)
			out.emit(event{Kind: "stats", Goroutines: runtime.NumGoroutine(), HeapBytes: m.HeapAlloc})
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// storeClient is a worker's side of the store. Fenced calls are recorded: a call event before
// the request, a ret event after it, so that a call cut short by a kill is still in the history.
type storeClient struct {
	b      chaosstore.Backend
	worker int
	seq    *atomic.Int64 // call ids, shared by the worker's loops
}

// recorded runs one fenced call and records it.
func (c *storeClient) recorded(out *emitter, kind chaoscheck.OpKind, res string, f uint64, job int64) chaosstore.Answer {
	id := int(c.seq.Add(1))
	op := chaoscheck.Op{Worker: c.worker, Resource: res, Kind: kind, Fence: f, Job: job, Call: time.Now().UnixNano()}
	out.emit(event{Kind: "call", ID: id, Op: &op})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	a, err := c.b.Call(ctx, string(kind), res, f, job, c.worker)
	cancel()
	op.Return = time.Now().UnixNano()
	op.Outcome = a.Outcome
	if err != nil {
		op.Outcome = chaoscheck.Unknown
	}
	if kind == chaoscheck.Claim {
		op.Job = a.Job
	}
	out.emit(event{Kind: "ret", ID: id, Op: &op})
	return a
}

// claim takes the row for f and returns its next job; ok is false when the row refused f.
func (c *storeClient) claim(out *emitter, res string, f uint64) (job int64, ok bool) {
	a := c.recorded(out, chaoscheck.Claim, res, f, 0)
	return a.Job, a.Outcome == chaoscheck.OK
}

// write delivers job on the row for f; false when the row refused f or did not answer.
func (c *storeClient) write(out *emitter, res string, f uint64, job int64) bool {
	return c.recorded(out, chaoscheck.Write, res, f, job).Outcome == chaoscheck.OK
}

// shadowRead returns the shadow row's next job; ok is false when the store did not answer.
func (c *storeClient) shadowRead(res string) (int64, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, err := c.b.Call(ctx, "shadow-read", res, 0, 0, c.worker)
	return a.Job, err == nil
}

func (c *storeClient) shadowWrite(res string, job int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = c.b.Call(ctx, "shadow-write", res, 0, job, c.worker)
}
