package chaosworker

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"quorumlock.dev/internal/harness/childproc"
)

// Proc is one worker process.
type Proc struct {
	id    int
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{} // closed when the process has been reaped and its output read
	once  sync.Once
}

// Start starts worker cfg.ID: this same program, made a worker by [Env], with its log in dir.
// What it reports goes to rec.
func Start(dir string, cfg Config, rec *Recorder) (*Proc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	spec, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), Env+"="+string(spec))
	cmd.SysProcAttr = childproc.SysProcAttr(nil)
	logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("worker%d.log", cfg.ID)))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd.Stderr = logf
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("chaos: start worker: %w", err)
	}
	p := &Proc{id: cfg.ID, cmd: cmd, stdin: stdin, done: make(chan struct{})}
	go func() {
		rec.read(cfg.ID, stdout)
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pid is the worker's process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Stop asks the worker to finish (its stdin closes) and kills it if it has not after grace.
func (p *Proc) Stop(grace time.Duration) {
	_ = p.stdin.Close()
	_ = syscall.Kill(p.Pid(), syscall.SIGCONT) // a paused worker could not hear it
	select {
	case <-p.done:
	case <-time.After(grace):
		p.Kill()
	}
}

// Kill ends the worker with SIGKILL and waits until it has been reaped.
func (p *Proc) Kill() {
	p.once.Do(func() { _ = syscall.Kill(-p.Pid(), syscall.SIGKILL) })
	<-p.done
}

// Exited reports whether the worker has been reaped.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}
