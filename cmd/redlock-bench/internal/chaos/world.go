package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"quorumlock.dev/cmd/redlock-bench/internal/chaoscheck"
	"quorumlock.dev/cmd/redlock-bench/internal/netns"
	"quorumlock.dev/cmd/redlock-bench/internal/sentinel"
	"quorumlock.dev/internal/childproc"
	"quorumlock.dev/internal/clockshim"
	"quorumlock.dev/internal/faultproxy"
	"quorumlock.dev/internal/redisserver"
)

// world is one run of a scenario: the masters, the fence counter, the store, the workers,
// and what the workers said.
type world struct {
	cfg  Config
	sc   *scenario
	dir  string
	size size

	servers []*redisserver.Server // the masters' processes; an entry may be nil (a master under Sentinel)
	proxies []*faultproxy.Proxy   // nil unless the scenario puts masters behind proxies
	masters []master              // how workers reach each master
	direct  []string              // each master's own address, for the majority check
	counter *redisserver.Server
	store   *memStore     // the memory store; nil with PostgreSQL
	pg      *pgxpool.Pool // the PostgreSQL store's database; nil with the memory store
	prefix  string        // the PostgreSQL store's tables
	workers []*workerProc
	rec     *recorder
	hosts   []*netns.Host      // the masters' network namespaces, in the partition scenario
	clocks  []*clockshim.Clock // the clocks of the first masters, in the clock scenario
	group   *sentinel.Group    // master 0 under Sentinel, in the failover scenario

	cleanup []func()
	keep    bool // leave dir behind: the run failed, and its logs say why
}

// size is what a run's length and load come to, from Config and the scenario.
type size struct {
	workers, loops, resources int
	ttl, hold                 time.Duration
	steady                    time.Duration // healthy running before the fault and after the recovery time
}

func (w *world) addCleanup(f func()) { w.cleanup = append(w.cleanup, f) }

// close stops everything the run started, last first.
func (w *world) close() {
	for _, wp := range w.workers {
		wp.kill()
	}
	for i := len(w.cleanup) - 1; i >= 0; i-- {
		w.cleanup[i]()
	}
	if w.dir != "" && !w.keep {
		_ = os.RemoveAll(w.dir)
	}
}

// startRedis starts a redis-server in the run's dir, stopped by close.
func (w *world) startRedis(ctx context.Context, name string, opt redisserver.Options) (*redisserver.Server, error) {
	opt.Dir = filepath.Join(w.dir, name)
	s, err := redisserver.Start(ctx, opt)
	if err != nil {
		return nil, err
	}
	w.addCleanup(func() { _ = s.Stop() })
	return s, nil
}

// startStore makes the run's store: the memory store, or tables of their own in PostgreSQL.
func (w *world) startStore(ctx context.Context) error {
	if w.cfg.PGDSN == "" {
		s, err := startMemStore()
		if err != nil {
			return err
		}
		w.store = s
		w.addCleanup(s.close)
		return nil
	}
	pool, err := pgxpool.New(ctx, w.cfg.PGDSN)
	if err != nil {
		return fmt.Errorf("chaos: postgres: %w", err)
	}
	w.addCleanup(pool.Close)
	w.pg, w.prefix = pool, fmt.Sprintf("chaos_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9)
	w.addCleanup(func() { _ = dropPG(context.Background(), pool, w.prefix) })
	return setupPG(ctx, pool, w.prefix, resources(w.size.resources))
}

// final is what the store holds.
func (w *world) final(ctx context.Context) (chaoscheck.Final, error) {
	if w.store != nil {
		return w.store.final(), nil
	}
	return finalPG(ctx, w.pg, w.prefix)
}

// startMasters starts the masters the scenario has not started itself, and proxies in front
// of them when the scenario asks for them.
func (w *world) startMasters(ctx context.Context) error {
	n := w.cfg.Masters
	if w.servers == nil {
		w.servers = make([]*redisserver.Server, n)
	}
	if w.masters == nil {
		w.masters = make([]master, n)
		w.direct = make([]string, n)
	}
	for i := range n {
		if w.masters[i].Addr != "" || len(w.masters[i].Sentinels) > 0 {
			continue
		}
		s, err := w.startRedis(ctx, fmt.Sprintf("master%d", i), w.sc.serverOptions(w, i))
		if err != nil {
			return err
		}
		w.servers[i] = s
		w.masters[i] = master{Addr: s.Addr()}
		w.direct[i] = s.Addr()
	}
	if w.sc.proxied {
		w.proxies = make([]*faultproxy.Proxy, n)
		for i := range n {
			p, err := faultproxy.New(w.masters[i].Addr)
			if err != nil {
				return err
			}
			w.addCleanup(func() { _ = p.Close() })
			w.proxies[i] = p
			w.masters[i].Addr = p.Addr()
		}
	}
	return nil
}

// workerProc is one worker process.
type workerProc struct {
	id    int
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{} // closed when the process has been reaped and its output read
	once  sync.Once
}

// startWorker starts worker id: this same program, made a worker by WorkerEnv.
func (w *world) startWorker(id int) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	cfg := workerConfig{
		ID: id, Masters: w.masters, Direct: w.direct, Counter: w.counter.Addr(),
		Resources: resources(w.size.resources), TTL: w.size.ttl, NodeTimeout: w.cfg.NodeTimeout,
		Hold: w.size.hold, Retry: w.cfg.Retry, Loops: w.size.loops, Guard: w.sc.guard,
	}
	if w.store != nil {
		cfg.Store = w.store.url
	} else {
		cfg.PGDSN, cfg.PGPrefix = w.cfg.PGDSN, w.prefix
	}
	spec, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), WorkerEnv+"="+string(spec))
	cmd.SysProcAttr = childproc.SysProcAttr(nil)
	logf, err := os.Create(filepath.Join(w.dir, fmt.Sprintf("worker%d.log", id)))
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd.Stderr = logf
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("chaos: start worker: %w", err)
	}
	wp := &workerProc{id: id, cmd: cmd, stdin: stdin, done: make(chan struct{})}
	w.workers = append(w.workers, wp)
	go func() {
		w.rec.read(id, stdout)
		_ = cmd.Wait()
		close(wp.done)
	}()
	return nil
}

func resources(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("chaos:R%d", i)
	}
	return out
}

func (wp *workerProc) pid() int { return wp.cmd.Process.Pid }

// stop asks the worker to finish (its stdin closes) and kills it if it has not after grace.
func (wp *workerProc) stop(grace time.Duration) {
	_ = wp.stdin.Close()
	_ = syscall.Kill(wp.pid(), syscall.SIGCONT) // a paused worker could not hear it
	select {
	case <-wp.done:
	case <-time.After(grace):
		wp.kill()
	}
}

// kill ends the worker with SIGKILL and waits until it has been reaped.
func (wp *workerProc) kill() {
	wp.once.Do(func() { _ = syscall.Kill(-wp.pid(), syscall.SIGKILL) })
	<-wp.done
}

// exited reports whether the worker has been reaped.
func (wp *workerProc) exited() bool {
	select {
	case <-wp.done:
		return true
	default:
		return false
	}
}

// recorder collects the workers' events.
type recorder struct {
	mu       sync.Mutex
	holdings map[string]*chaoscheck.Holding // by token
	order    []string                       // tokens in the order they were won
	calls    map[[2]int]*chaoscheck.Op      // by worker and call id
	attempts []attempt
	majority []int // per won lock, the masters found holding it
	peakG    int
	peakHeap uint64
	changed  chan struct{} // closed and replaced on every event
	bad      []string      // lines that did not parse
}

type attempt struct {
	result  string
	latency time.Duration
	at      int64
}

func newRecorder() *recorder {
	return &recorder{holdings: map[string]*chaoscheck.Holding{}, calls: map[[2]int]*chaoscheck.Op{}, changed: make(chan struct{})}
}

func (r *recorder) read(worker int, out io.Reader) {
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var ev event
		err := json.Unmarshal(sc.Bytes(), &ev)
		r.mu.Lock()
		if err != nil {
			r.bad = append(r.bad, fmt.Sprintf("worker %d: %q", worker, sc.Text()))
		} else {
			r.add(worker, ev)
		}
		close(r.changed)
		r.changed = make(chan struct{})
		r.mu.Unlock()
	}
}

// add records ev; the caller holds r.mu.
func (r *recorder) add(worker int, ev event) {
	switch ev.Kind {
	case "attempt":
		r.attempts = append(r.attempts, attempt{result: ev.Result, latency: time.Duration(ev.Latency), at: ev.At})
	case "hold":
		h := *ev.Holding
		if old, ok := r.holdings[h.Token]; ok {
			*old = h
			return
		}
		r.holdings[h.Token] = &h
		r.order = append(r.order, h.Token)
		r.majority = append(r.majority, ev.Majority)
	case "call", "ret":
		op := *ev.Op
		if ev.Kind == "call" {
			op.Outcome = chaoscheck.Unknown
		}
		r.calls[[2]int{worker, ev.ID}] = &op
	case "stats":
		r.peakG = max(r.peakG, ev.Goroutines)
		r.peakHeap = max(r.peakHeap, ev.HeapBytes)
	}
}

// waitFor returns the first recorded op that ok accepts, waiting until ctx ends.
func (r *recorder) waitFor(ctx context.Context, ok func(op chaoscheck.Op) bool) (chaoscheck.Op, error) {
	seen := map[[2]int]bool{}
	for {
		r.mu.Lock()
		for k, op := range r.calls {
			if !seen[k] && op.Return != 0 {
				seen[k] = true
				if ok(*op) {
					r.mu.Unlock()
					return *op, nil
				}
			}
		}
		ch := r.changed
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return chaoscheck.Op{}, fmt.Errorf("chaos: waiting for the workers: %w", context.Cause(ctx))
		case <-ch:
		}
	}
}

// claimed waits for a claim the store accepted, after since, by a worker that pred accepts.
func (r *recorder) claimed(ctx context.Context, since time.Time, pred func(op chaoscheck.Op) bool) (chaoscheck.Op, error) {
	return r.waitFor(ctx, func(op chaoscheck.Op) bool {
		return op.Kind == chaoscheck.Claim && op.Outcome == chaoscheck.OK && op.Call >= since.UnixNano() && (pred == nil || pred(op))
	})
}

// holder returns worker's live holding of res: won, not released.
func (r *recorder) holder(worker int, res string) (chaoscheck.Holding, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.order) - 1; i >= 0; i-- {
		h := r.holdings[r.order[i]]
		if h.Worker == worker && h.Resource == res && h.Released == 0 {
			return *h, true
		}
	}
	return chaoscheck.Holding{}, false
}

// acquisitions returns the number of locks won so far.
func (r *recorder) acquisitions() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.order)
}

// history is what the workers recorded, for chaoscheck.
func (r *recorder) history(final chaoscheck.Final) chaoscheck.History {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := chaoscheck.History{Final: final}
	for _, tok := range r.order {
		h.Holdings = append(h.Holdings, *r.holdings[tok])
	}
	for _, op := range r.calls {
		o := *op
		if o.Outcome == chaoscheck.Unknown {
			o.Return = 0
		}
		h.Ops = append(h.Ops, o)
	}
	return h
}

// portClosed reports whether nothing accepts connections on addr.
func portClosed(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return true
	}
	c.Close()
	return false
}

// runID returns the run_id of the Redis server at addr.
func runID(ctx context.Context, addr string) (string, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	info, err := c.InfoMap(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	id := info["Server"]["run_id"]
	if id == "" {
		return "", errors.New("chaos: INFO server has no run_id")
	}
	return id, nil
}
