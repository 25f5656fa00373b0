//go:build linux

// Package clockshim gives real server processes a wall clock that a test moves, for faults such
// as a Redis master whose clock jumps forward and so expires a lock key early. [New] compiles a
// small LD_PRELOAD library with the C compiler on PATH; [Clock.Jump] steps the clock and
// [Clock.SetRate] makes it run fast, slow or stand still, from the server's next clock read on.
// It affects only dynamically linked C programs that read the wall clock through libc's
// gettimeofday, time or clock_gettime (CLOCK_REALTIME and CLOCK_REALTIME_COARSE): monotonic
// clocks are untouched, and Go programs, which read clocks through the vDSO, never see it.
package clockshim

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// ErrNoCompiler is returned by [New] when neither cc nor gcc is on PATH.
var ErrNoCompiler = errors.New("clockshim: no C compiler (cc or gcc) on PATH")

//go:embed csrc/clockshim.c
var source []byte

const (
	envVar    = "CLOCKSHIM_STATE" // read by csrc/clockshim.c
	stateSize = int(unsafe.Sizeof(state{}))
)

// state is the layout of the file csrc/clockshim.c maps; keep the two in step. seq is odd while
// an update is under way, so the shim never combines fields of two updates.
type state struct {
	seq   uint64
	base  int64  // offset in ns at t0
	t0    int64  // real CLOCK_REALTIME ns
	drift uint64 // rate-1 as float64 bits: a file of zeros is an unshifted clock
}

// Clock is the shifted wall clock of every process started with its [Clock.Env]. Its methods
// are safe for concurrent use.
type Clock struct {
	env []string

	mu    sync.Mutex
	mem   []byte // the state file, mapped shared; nil after Close
	base  int64
	t0    int64
	drift float64
}

// New writes the shim's source, the compiled library and the state file into dir, which must
// exist, and returns a clock with no shift. The compiler runs under ctx. dir's absolute path must
// not contain a space or a colon, which separate the entries of LD_PRELOAD.
func New(ctx context.Context, dir string) (*Clock, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("clockshim: %w", err)
	}
	if strings.ContainsAny(dir, " \t:") {
		return nil, fmt.Errorf("clockshim: LD_PRELOAD cannot name a path with a space or colon: %q", dir)
	}
	cc, err := compiler()
	if err != nil {
		return nil, err
	}
	src, lib := filepath.Join(dir, "clockshim.c"), filepath.Join(dir, "clockshim.so")
	if err := os.WriteFile(src, source, 0o644); err != nil {
		return nil, fmt.Errorf("clockshim: %w", err)
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, cc, "-shared", "-fPIC", "-O2", "-Wall", "-o", lib, src)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("clockshim: compile %s: %w: %s", src, err, bytes.TrimSpace(out.Bytes()))
	}

	path := filepath.Join(dir, "clockshim.state")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("clockshim: %w", err)
	}
	defer f.Close() // the mapping outlives the descriptor
	if err := f.Truncate(int64(stateSize)); err != nil {
		return nil, fmt.Errorf("clockshim: %w", err)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, stateSize,
		syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("clockshim: map %s: %w", path, err)
	}
	return &Clock{env: []string{"LD_PRELOAD=" + lib, envVar + "=" + path}, mem: mem}, nil
}

func compiler() (string, error) {
	for _, name := range []string{"cc", "gcc"} {
		if path, err := exec.LookPath(name); err == nil {
			return path, nil
		}
	}
	return "", ErrNoCompiler
}

// Env returns the variables that put a process under the clock, for redisserver.Options.Env or
// exec.Cmd.Env. Its LD_PRELOAD replaces any the process would inherit, and also loads into a
// wrapper such as ip netns exec. A process restarted with them resumes the clock where it is now.
func (c *Clock) Env() []string { return append([]string(nil), c.env...) }

// Jump moves the clock by d, forward or (d < 0) back, on top of earlier jumps. It panics after
// [Clock.Close].
func (c *Clock) Jump(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now().UnixNano()
	c.base, c.t0 = addSat(c.offsetAt(now), int64(d)), now
	c.publish("Jump")
}

// SetRate makes the clock advance rate seconds per real second from now on: 10 runs it ten
// times fast, 0 stops it, 1 (the start) is real time. The offset built up so far stays. It panics
// if rate is negative, infinite or NaN, or after [Clock.Close].
func (c *Clock) SetRate(rate float64) {
	if !(rate >= 0) || math.IsInf(rate, 1) {
		panic(fmt.Sprintf("clockshim: SetRate(%v): rate must be finite and not negative", rate))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now().UnixNano()
	c.base, c.t0, c.drift = c.offsetAt(now), now, rate-1
	c.publish("SetRate")
}

// Offset returns how far the clock is ahead of real time (behind, if negative).
func (c *Clock) Offset() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Duration(c.offsetAt(time.Now().UnixNano()))
}

// Close unmaps the state file. Processes under the clock keep it as it was last set; the files
// stay in dir. Close may be called more than once.
func (c *Clock) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mem == nil {
		return nil
	}
	err := syscall.Munmap(c.mem)
	c.mem = nil
	if err != nil {
		return fmt.Errorf("clockshim: %w", err)
	}
	return nil
}

// offsetAt is the offset at real time now, by the formula csrc/clockshim.c applies. The caller
// holds c.mu.
func (c *Clock) offsetAt(now int64) int64 {
	if c.drift == 0 {
		return c.base
	}
	extra := c.drift * float64(now-c.t0)
	switch {
	case extra >= math.MaxInt64:
		return math.MaxInt64
	case extra <= math.MinInt64:
		return math.MinInt64
	}
	return addSat(c.base, int64(extra))
}

// publish writes the clock to the state file under its sequence lock. The caller holds c.mu.
func (c *Clock) publish(op string) {
	if c.mem == nil {
		panic("clockshim: " + op + " after Close")
	}
	// mmap returns page-aligned memory outside the Go heap, so the 8-byte atomics are aligned.
	s := (*state)(unsafe.Pointer(&c.mem[0]))
	atomic.AddUint64(&s.seq, 1)
	atomic.StoreInt64(&s.base, c.base)
	atomic.StoreInt64(&s.t0, c.t0)
	atomic.StoreUint64(&s.drift, math.Float64bits(c.drift))
	atomic.AddUint64(&s.seq, 1)
}

func addSat(a, b int64) int64 {
	r := a + b
	if (r > a) != (b > 0) {
		if b > 0 {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return r
}
