package childproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	// startAttempts bounds the retries when another process takes the port between the moment
	// it was found free and the moment the server binds it.
	startAttempts = 3
	// probeTimeout bounds one readiness probe, so that a server that accepts but never answers
	// cannot use up the whole start.
	probeTimeout = time.Second
	pollInterval = 10 * time.Millisecond
	logTailBytes = 4 << 10
)

// Spec describes a server process for [Start].
type Spec struct {
	Path       string                  // the executable
	Args       func(port int) []string // its arguments, for the loopback port it is to listen on
	Port       int                     // if 0, a free port, and another one if that is taken meanwhile
	Dir        string                  // its working dir; if empty, ours
	Log        string                  // the file its stdout and stderr are appended to
	Credential *syscall.Credential     // the user it runs as; nil: ourselves
	Env        []string                // added to our environment ("K=V"); later entries win
	// Ready probes the server, at most 1 s at a time, until it returns nil. It should check
	// that the server answering is p: if another process holds the port, p exits while the
	// other one answers.
	Ready func(ctx context.Context, p *Process) error
}

// Process is one run of a server started by [Start]. Its methods are safe for concurrent use.
type Process struct {
	cmd  *exec.Cmd
	port int
	done chan struct{} // closed once cmd.Wait returned, by the one goroutine that calls it
	err  error         // cmd.Wait's; valid once done is closed

	mu     sync.Mutex
	paused []int   // the processes Pause stopped, the server last; nil unless paused
	reaper *reaper // while paused
}

// Start runs spec's server in a process group of its own and returns once spec.Ready accepts
// it, or when ctx ends. The process outlives ctx. On failure nothing keeps running, and the
// error carries the end of what the server wrote to spec.Log since Start began.
func Start(ctx context.Context, spec Spec) (*Process, error) {
	if spec.Port != 0 {
		p, _, err := launch(ctx, spec, spec.Port)
		return p, err
	}
	for attempt := 1; ; attempt++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		p, busy, err := launch(ctx, spec, port)
		if !busy || attempt == startAttempts {
			return p, err
		}
	}
}

// launch is one attempt of Start on port. busy reports that it failed because the port was
// taken.
func launch(ctx context.Context, spec Spec, port int) (p *Process, busy bool, err error) {
	// A file needs no copying goroutine that could outlive the process, and it holds what a
	// server prints before its own logging is set up.
	logf, err := os.OpenFile(spec.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, false, err
	}
	var logStart int64
	if fi, err := logf.Stat(); err == nil {
		logStart = fi.Size()
	}
	// Not CommandContext: ctx bounds the start, not the life of the server.
	cmd := exec.Command(spec.Path, spec.Args(port)...)
	cmd.Dir = spec.Dir
	if len(spec.Env) > 0 {
		cmd.Env = append(os.Environ(), spec.Env...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = SysProcAttr(spec.Credential)
	err = cmd.Start()
	logf.Close()
	if err != nil {
		return nil, false, err
	}
	p = &Process{cmd: cmd, port: port, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := p.waitReady(ctx, spec); err != nil {
		p.Kill()
		tail := logSince(spec.Log, logStart, logTailBytes)
		return nil, strings.Contains(tail, "Address already in use"),
			fmt.Errorf("start %s on port %d: %w\n--- %s ---\n%s", spec.Path, port, err, spec.Log, tail)
	}
	return p, false, nil
}

func (p *Process) waitReady(ctx context.Context, spec Spec) error {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		probeCtx, cancel := context.WithTimeout(ctx, probeTimeout)
		err := spec.Ready(probeCtx, p)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited: %v", filepath.Base(spec.Path), p.err)
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-tick.C:
		}
	}
}

// Pid returns the server's process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Port returns the loopback port the server was started on.
func (p *Process) Port() int { return p.port }

// Done is closed once the server has exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

func (p *Process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Pause stops the server and each of its children with SIGSTOP; pausing a paused server does
// nothing. If our process dies while the server is paused, a shell that Pause started kills
// them all, since a stopped child cannot notice its parent's death. Outside Linux, only the
// server is paused.
func (p *Process) Pause() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited() {
		return fmt.Errorf("pause: process %d has exited", p.Pid())
	}
	if p.paused != nil {
		return nil
	}
	pid := p.Pid()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("pause %d: %w", pid, err)
	}
	// Once the server is stopped it forks no more children, so the list below is complete.
	waitStopped(pid)
	kids := children(pid)
	for _, kid := range kids {
		_ = syscall.Kill(kid, syscall.SIGSTOP) // a child that exits meanwhile needs no pause
	}
	for _, kid := range kids {
		waitStopped(kid)
	}
	p.paused = append(kids, pid)
	p.reaper = startReaper(p.paused)
	return nil
}

// Resume continues what Pause stopped with SIGCONT.
func (p *Process) Resume() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited() {
		return fmt.Errorf("resume: process %d has exited", p.Pid())
	}
	p.resume()
	return nil
}

// resume is Resume with p.mu held.
func (p *Process) resume() {
	for _, pid := range p.paused {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	p.paused = nil
	p.reaper.release()
	p.reaper = nil
}

// Kill ends the server, its process group and its children with SIGKILL, and returns once the
// server has been reaped. Killing a server that has exited does nothing.
func (p *Process) Kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.kill()
}

// kill is Kill with p.mu held.
func (p *Process) kill() {
	if !p.exited() {
		// Stopped first, the server cannot fork a child we would miss.
		pid := p.Pid()
		if syscall.Kill(pid, syscall.SIGSTOP) == nil {
			waitStopped(pid)
		}
		for _, kid := range children(pid) {
			_ = syscall.Kill(kid, syscall.SIGKILL)
		}
		if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
			_ = p.cmd.Process.Kill()
		}
		<-p.done
	}
	p.paused = nil
	p.reaper.release()
	p.reaper = nil
}

// Stop resumes a paused server, sends it sig, and kills it as [Process.Kill] does if it has
// not exited after timeout. Stopping a server that has exited does nothing.
func (p *Process) Stop(sig os.Signal, timeout time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited() {
		p.kill() // releases the reaper of a server that died paused
		return
	}
	// A stopped process would hold sig until the timeout ran out.
	p.resume()
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.kill()
	}
}

// reaper is a shell, outside our process group, that kills a paused server if our process dies
// before it resumes or kills the server: the kernel kills the server with us (Pdeathsig), but
// its stopped children cannot notice, and would stay stopped forever.
type reaper struct {
	cmd *exec.Cmd
	in  io.WriteCloser // its stdin: "release" lets it go, end of file makes it kill
}

// startReaper starts a reaper for pids; without a shell, there is none.
func startReaper(pids []int) *reaper {
	sh, err := exec.LookPath("sh")
	if err != nil {
		return nil
	}
	args := []string{"-c", `read -r line; [ "$line" = release ] || kill -9 "$@"`, "childproc-reaper"}
	for _, p := range pids {
		args = append(args, strconv.Itoa(p))
	}
	cmd := exec.Command(sh, args...)
	// No Pdeathsig: it must outlive us.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil
	}
	if err := cmd.Start(); err != nil {
		return nil
	}
	return &reaper{cmd: cmd, in: in}
}

// release ends the reaper without its killing anything.
func (r *reaper) release() {
	if r == nil {
		return
	}
	_, _ = io.WriteString(r.in, "release\n")
	_ = r.in.Close()
	_ = r.cmd.Wait()
}
