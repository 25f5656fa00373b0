package benchrun

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/redis/go-redis/v9"

	"quorumlock.dev/cmd/redlock-bench/internal/backend"
	"quorumlock.dev/cmd/redlock-bench/internal/drivers"
	"quorumlock.dev/cmd/redlock-bench/internal/progress"
	"quorumlock.dev/internal/harness/childproc"
)

// The contended scenario's -procs rows run their goroutines in worker
// processes: this program started again with workerEnv set, told what to do
// on its stdin, one JSON line per message, and answering on its stdout. Each
// worker runs the same loop (worker.contend) as the other rows, a client of
// its own per goroutine, and reports each slice's counts, histograms and
// log of sections (wall-clock times, one machine) to the parent, which
// merges them into the row: the log across processes gives the handoffs and
// the violations, since no counter in memory sees every holder.

// workerEnv makes a process a -procs worker; its value is "1". The spec
// comes on stdin, so that no password is in the environment.
const workerEnv = "QUORUMLOCK_BENCH_WORKER"

// procRow is a -procs row: n processes, each told spec with its goroutines
// and the row's resources.
type procRow struct {
	n    int
	spec procSpec
}

// procSpec is the first line a worker reads: what it locks, and how.
type procSpec struct {
	Masters     []string      `json:"masters"` // as backend.ServerOptions reads them
	Fence       string        `json:"fence"`   // the fence counter, likewise; "" for none
	Password    string        `json:"password"`
	TLSCAFile   string        `json:"tls_ca_file"`
	Driver      string        `json:"driver"`
	Fair        bool          `json:"fair"`
	Goroutines  []int         `json:"goroutines"` // the run's numbers of this worker's goroutines
	Resources   []string      `json:"resources"`
	TTL         time.Duration `json:"ttl"`
	NodeTimeout time.Duration `json:"node_timeout"`
	Hold        time.Duration `json:"hold"`
}

// procOrder starts a slice: lock until End (Unix ns), or Budget attempts
// when it is set.
type procOrder struct {
	End    int64 `json:"end"`
	Budget int64 `json:"budget"`
}

// procReply is a line a worker writes: it is ready, a slice's figures, or
// the error that ended it.
type procReply struct {
	Ready bool       `json:"ready,omitempty"`
	Slice *procSlice `json:"slice,omitempty"`
	Err   string     `json:"err,omitempty"`
}

// procSlice is what a worker measured in one slice; see tally.
type procSlice struct {
	Attempts    int64           `json:"attempts"`
	Acquired    int64           `json:"acquired"`
	Contended   int64           `json:"contended"`
	Unavailable int64           `json:"unavailable"`
	Errors      int64           `json:"errors"`
	FirstError  string          `json:"first_error,omitempty"`
	Acquire     string          `json:"acquire"` // HDR histograms, V2 compressed
	Cycle       string          `json:"cycle"`
	Wait        string          `json:"wait"`
	Sections    []int64         `json:"sections"` // per goroutine, in the spec's order
	Log         [][]procSection `json:"log"`      // per resource, in the order the sections began
	Rounds      int64           `json:"rounds"`
	LostRounds  int64           `json:"lost_rounds"`
	SplitRounds int64           `json:"split_rounds"`
	CPU         time.Duration   `json:"cpu"`
	Mallocs     uint64          `json:"mallocs"`
}

// procSection is a section with the run's number of its goroutine and wall
// clock times (Unix ns).
type procSection struct {
	Goroutine int   `json:"g"`
	Acquired  int64 `json:"acquired"`
	Released  int64 `json:"released"`
	Failed    bool  `json:"failed,omitempty"`
}

// procRow is what the workers of row sp need: its masters and fence as the
// run was given them (with the credentials of an addrs backend).
func (s *setup) procRow(d string, sp spec) *procRow {
	masters, fence := sp.addrs, s.env.Fence
	if s.env.Backend == "addrs" {
		masters = s.cfg.Backend.Addrs[:len(sp.addrs)]
		fence = s.cfg.Backend.FenceAddr
	}
	if !s.cfg.Fence {
		fence = ""
	}
	return &procRow{n: sp.procs, spec: procSpec{
		Masters: masters, Fence: fence, Password: s.cfg.Backend.Password, TLSCAFile: s.cfg.Backend.TLSCAFile,
		Driver: d, Fair: sp.fair, TTL: s.cfg.TTL, NodeTimeout: s.cfg.NodeTimeout, Hold: s.cfg.Hold,
	}}
}

// fleet is a -procs row's worker processes at one concurrency.
type fleet struct {
	procs []*proc
	c     int // goroutines in all
}

// proc is one worker process.
type proc struct {
	cmd        *exec.Cmd
	in         io.WriteCloser
	enc        *json.Encoder
	out        *json.Decoder
	stderr     bytes.Buffer
	goroutines []int
}

// startFleet starts v's workers for c goroutines, goroutine i in worker i
// mod n (n at most c), and waits until each is ready. When ctx ends it
// kills them.
func startFleet(ctx context.Context, v *variant, c int) (*fleet, error) {
	n := min(v.procs.n, c)
	f := &fleet{c: c}
	stop := context.AfterFunc(ctx, f.kill)
	defer stop()
	for p := range n {
		spec := v.procs.spec
		spec.Resources = v.resources
		for g := p; g < c; g += n {
			spec.Goroutines = append(spec.Goroutines, g)
		}
		pr, err := startProc(spec)
		if err != nil {
			f.close()
			return nil, err
		}
		f.procs = append(f.procs, pr)
	}
	for _, pr := range f.procs {
		var r procReply
		if err := pr.read(&r); err != nil {
			f.close()
			return nil, errors.Join(err, ctx.Err())
		}
	}
	return f, nil
}

func startProc(spec procSpec) (*proc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("benchrun: start a worker: %w", err)
	}
	pr := &proc{cmd: exec.Command(self), goroutines: spec.Goroutines}
	pr.cmd.Env = append(os.Environ(), workerEnv+"=1")
	// Its own process group (a Ctrl-C reaches it through us, as the end of
	// its stdin) and killed by the kernel if we die.
	pr.cmd.SysProcAttr = childproc.SysProcAttr(nil)
	pr.cmd.Stderr = &pr.stderr
	if pr.in, err = pr.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := pr.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := pr.cmd.Start(); err != nil {
		return nil, fmt.Errorf("benchrun: start a worker: %w", err)
	}
	pr.enc, pr.out = json.NewEncoder(pr.in), json.NewDecoder(stdout)
	if err := pr.enc.Encode(spec); err != nil {
		return nil, pr.failed(err)
	}
	return pr, nil
}

// read reads the worker's next line into r; a line that carries an error,
// or no line, is an error.
func (p *proc) read(r *procReply) error {
	if err := p.out.Decode(r); err != nil {
		return p.failed(err)
	}
	if r.Err != "" {
		return fmt.Errorf("benchrun: worker process %d: %s", p.cmd.Process.Pid, r.Err)
	}
	return nil
}

// failed is the error of a worker that could not be read or written: why,
// with the end of what it said on stderr once it has exited.
func (p *proc) failed(err error) error {
	_ = p.in.Close()
	_ = p.cmd.Wait() // the stderr copy is done when it returns
	said := bytes.TrimSpace(p.stderr.Bytes())
	if len(said) > 500 {
		said = said[len(said)-500:]
	}
	return fmt.Errorf("benchrun: worker process %d: %w (stderr: %q)", p.cmd.Process.Pid, err, said)
}

// slice has every worker lock until end (or its share of budget) and merges
// what they report into t and the guards' logs.
func (f *fleet) slice(ctx context.Context, end time.Time, budget int64, t *tally, guards []*guard, bar *progress.Bar) error {
	// A worker whose stdin closes ends its Locks and reports.
	stop := context.AfterFunc(ctx, f.closeInputs)
	defer stop()
	left := budget
	for i, pr := range f.procs {
		share := budget * int64(len(pr.goroutines)) / int64(f.c)
		if i == len(f.procs)-1 {
			share = left
		}
		left -= share
		if err := pr.enc.Encode(procOrder{End: end.UnixNano(), Budget: share}); err != nil {
			return errors.Join(pr.failed(err), ctx.Err())
		}
	}
	var errs []error
	for _, pr := range f.procs {
		var r procReply
		if err := pr.read(&r); err != nil {
			errs = append(errs, err)
			continue
		}
		if r.Slice == nil {
			errs = append(errs, fmt.Errorf("benchrun: worker process %d sent no slice", pr.cmd.Process.Pid))
			continue
		}
		if err := r.Slice.addTo(t, guards, pr.goroutines); err != nil {
			errs = append(errs, err)
		}
		bar.Add(r.Slice.Attempts)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.Join(errs...)
}

// addTo merges s, measured by the worker of goroutines, into t and guards.
func (s *procSlice) addTo(t *tally, guards []*guard, goroutines []int) error {
	if len(s.Sections) != len(goroutines) || len(s.Log) != len(guards) {
		return fmt.Errorf("benchrun: a worker reported %d goroutines and %d resources, want %d and %d",
			len(s.Sections), len(s.Log), len(goroutines), len(guards))
	}
	for _, m := range []struct {
		into *hdrhistogram.Histogram
		from string
	}{{t.acquire, s.Acquire}, {t.cycle, s.Cycle}, {t.wait, s.Wait}} {
		h, err := hdrhistogram.Decode([]byte(m.from))
		if err != nil {
			return fmt.Errorf("benchrun: a worker's histogram: %w", err)
		}
		m.into.Merge(h)
	}
	t.attempts += s.Attempts
	t.acquired += s.Acquired
	t.contended += s.Contended
	t.unavailable += s.Unavailable
	t.errs += s.Errors
	if t.firstErr == nil && s.FirstError != "" {
		t.firstErr = errors.New(s.FirstError)
	}
	for i, n := range s.Sections {
		t.sections[goroutines[i]] += n
	}
	for k, log := range s.Log {
		for _, e := range log {
			sec := section{worker: e.Goroutine, acquired: time.Unix(0, e.Acquired), failed: e.Failed}
			if e.Released != 0 {
				sec.released = time.Unix(0, e.Released)
			}
			guards[k].sections = append(guards[k].sections, sec)
		}
	}
	t.rounds += s.Rounds
	t.lostRounds += s.LostRounds
	t.splitRounds += s.SplitRounds
	t.cpu += s.CPU
	t.mallocs += s.Mallocs
	return nil
}

func (f *fleet) closeInputs() {
	for _, pr := range f.procs {
		_ = pr.in.Close()
	}
}

func (f *fleet) kill() {
	for _, pr := range f.procs {
		_ = pr.cmd.Process.Kill()
	}
}

// close ends the workers: their stdin closes, and one that has not exited
// after a few seconds is killed. A nil fleet is none.
func (f *fleet) close() {
	if f == nil {
		return
	}
	f.closeInputs()
	done := make(chan struct{})
	go func() {
		for _, pr := range f.procs {
			_ = pr.cmd.Wait()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		f.kill()
		<-done
	}
}

// MaybeWorker runs a -procs worker and exits when the process was started as
// one; otherwise it returns at once. A program that runs the contended
// scenario calls it first thing in main (or TestMain), since the workers are
// that same program started again.
func MaybeWorker() {
	if os.Getenv(workerEnv) == "" {
		return
	}
	// go-redis logs failed dials to stderr, which the parent keeps for errors.
	redis.SetLogger(silent{})
	if err := serve(context.Background(), os.Stdin, os.Stdout); err != nil {
		_ = json.NewEncoder(os.Stdout).Encode(procReply{Err: err.Error()})
		os.Exit(1)
	}
	os.Exit(0)
}

type silent struct{}

func (silent) Printf(context.Context, string, ...any) {}

// serve is a worker: it reads its spec, says it is ready, and measures a
// slice for each order until its stdin ends.
func serve(ctx context.Context, in io.Reader, out io.Writer) error {
	dec, enc := json.NewDecoder(in), json.NewEncoder(out)
	var spec procSpec
	if err := dec.Decode(&spec); err != nil {
		return fmt.Errorf("read the spec: %w", err)
	}
	w, err := newProcWorker(spec)
	if err != nil {
		return err
	}
	defer w.s.close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	orders := make(chan procOrder)
	go func() {
		defer cancel() // the parent is done with us, or gone: end the Locks under way
		defer close(orders)
		for {
			var o procOrder
			if dec.Decode(&o) != nil {
				return
			}
			select {
			case orders <- o:
			case <-ctx.Done():
				return
			}
		}
	}()
	if err := enc.Encode(procReply{Ready: true}); err != nil {
		return err
	}
	for o := range orders {
		sl, err := w.slice(ctx, o)
		if err != nil {
			return err
		}
		if err := enc.Encode(procReply{Slice: sl}); err != nil {
			return err
		}
	}
	return nil
}

// procWorker is a worker's part of a row: its goroutines, each with a
// client of its own, over guards of its own.
type procWorker struct {
	spec    procSpec
	cfg     Config
	s       *setup
	v       *variant
	workers []*worker
}

func newProcWorker(spec procSpec) (*procWorker, error) {
	masters, fence, err := backend.ServerOptions(spec.Masters, spec.Fence, spec.Password, spec.TLSCAFile)
	if err != nil {
		return nil, err
	}
	byAddr := map[string]*redis.Options{}
	addrs := make([]string, len(masters))
	for i, o := range masters {
		byAddr[o.Addr], addrs[i] = o, o.Addr
	}
	cfg := Config{
		Scenario: "contended", TTL: spec.TTL, NodeTimeout: spec.NodeTimeout, Hold: spec.Hold,
		Keys: len(spec.Resources), Concurrency: []int{len(spec.Goroutines)}, Fence: fence != nil,
	}
	s := &setup{cfg: cfg, sets: map[string]*drivers.Set{}, options: func(addr string) *redis.Options {
		o := *byAddr[addr]
		return &o
	}}
	if fence != nil {
		byAddr[fence.Addr], s.fence = fence, fence.Addr
	}
	v := &variant{resources: spec.Resources, rounds: &rounds{}, guards: make([]*guard, len(spec.Resources))}
	for k := range v.guards {
		v.guards[k] = &guard{}
	}
	for range spec.Goroutines {
		c, err := s.lockClient(spec.Driver, addrs, spec.Fair, false, v.rounds)
		if err != nil {
			s.close()
			return nil, err
		}
		v.clients = append(v.clients, c)
	}
	v.client = v.clients[0]
	return &procWorker{spec: spec, cfg: cfg, s: s, v: v, workers: newWorkers(true, len(spec.Goroutines))}, nil
}

// slice runs the worker's goroutines as o says and returns what they measured.
func (w *procWorker) slice(ctx context.Context, o procOrder) (*procSlice, error) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	cpuBefore := cpuTime()
	if err := runWorkers(ctx, w.cfg, w.v, w.workers, time.Now(), time.Unix(0, o.End), o.Budget, nil); err != nil {
		return nil, err
	}
	cpu := cpuTime() - cpuBefore
	runtime.ReadMemStats(&after)

	t := newTally(true, len(w.workers))
	collect(t, w.workers)
	w.v.rounds.collect(t)
	sl := &procSlice{
		Attempts: t.attempts, Acquired: t.acquired, Contended: t.contended, Unavailable: t.unavailable, Errors: t.errs,
		Sections: t.sections, Rounds: t.rounds, LostRounds: t.lostRounds, SplitRounds: t.splitRounds,
		CPU: cpu, Mallocs: after.Mallocs - before.Mallocs,
	}
	if t.firstErr != nil {
		sl.FirstError = t.firstErr.Error()
	}
	for _, enc := range []struct {
		into *string
		h    *hdrhistogram.Histogram
	}{{&sl.Acquire, t.acquire}, {&sl.Cycle, t.cycle}, {&sl.Wait, t.wait}} {
		b, err := enc.h.Encode(hdrhistogram.V2CompressedEncodingCookieBase)
		if err != nil {
			return nil, err
		}
		*enc.into = string(b)
	}
	for _, g := range w.v.guards {
		log := make([]procSection, len(g.sections))
		for i, s := range g.sections {
			log[i] = procSection{Goroutine: w.spec.Goroutines[s.worker], Acquired: s.acquired.UnixNano(), Failed: s.failed}
			if !s.released.IsZero() {
				log[i].Released = s.released.UnixNano()
			}
		}
		sl.Log = append(sl.Log, log)
		g.sections = g.sections[:0]
	}
	return sl, nil
}
