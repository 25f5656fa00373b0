// Package redisserver starts and controls real redis-server processes on the loopback interface,
// for integration tests (through [quorumlock.dev/internal/redistest]) and for the benchmark CLI.
// Each [Server] is one foreground child process on a free 127.0.0.1 port, without persistence
// unless the caller asks for it, that can be paused, killed and restarted on the same port to
// inject process faults. It does not install Redis, manage replication or clusters, or shape
// network traffic; network faults belong to [quorumlock.dev/internal/faultproxy].
package redisserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"quorumlock.dev/internal/childproc"
)

// ErrNotInstalled is returned by [Start] when Options.Binary is empty and no redis-server is
// found on PATH.
var ErrNotInstalled = errors.New("redisserver: redis-server not found on PATH")

const (
	readyTimeout = 5 * time.Second
	stopTimeout  = 2 * time.Second
	// startAttempts bounds the retries when another process takes the port between the moment
	// it was found free and the moment redis-server binds it.
	startAttempts = 3
	logName       = "redis.log"
	logTailBytes  = 2 << 10
)

// Options configures [Start]. The zero value starts a server with a fresh temporary data dir.
type Options struct {
	// Dir is the data dir. If empty, Start creates a temporary dir and Stop removes it.
	Dir string
	// Args are extra redis-server arguments, appended after the defaults so that they override
	// them (for example "--appendonly", "yes"). Overriding --port or --bind makes Start fail,
	// since it waits for the server on the address it chose.
	Args []string
	// Binary is the redis-server executable. If empty, it is looked up on PATH.
	Binary string
}

// Server is a redis-server child process. Its methods are safe for concurrent use.
type Server struct {
	binary string
	args   []string
	dir    string
	ownDir bool
	port   int

	mu     sync.Mutex
	proc   *proc // the latest process; nil only while Start runs
	paused bool
}

// proc is one run of redis-server. Exactly one goroutine calls cmd.Wait, so that the process is
// reaped once; everyone else learns of its exit from done.
type proc struct {
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error // valid once done is closed
}

// Start runs redis-server in the foreground on a free loopback port and returns once the server
// answers PING, or when ctx ends, or after 5 s. The process outlives ctx: ctx bounds only the
// wait, and the caller ends the process with [Server.Stop]. On failure the process is killed and
// the error carries the end of the server's log.
func Start(ctx context.Context, opt Options) (*Server, error) {
	s := &Server{binary: opt.Binary, args: append([]string(nil), opt.Args...), dir: opt.Dir}
	if s.binary == "" {
		path, err := exec.LookPath("redis-server")
		if err != nil {
			return nil, ErrNotInstalled
		}
		s.binary = path
	}
	if s.dir == "" {
		dir, err := os.MkdirTemp("", "redisserver-")
		if err != nil {
			return nil, fmt.Errorf("redisserver: %w", err)
		}
		s.dir, s.ownDir = dir, true
	} else {
		// redis-server changes into --dir before it opens --logfile, so a relative path would
		// be resolved twice.
		dir, err := filepath.Abs(s.dir)
		if err != nil {
			return nil, fmt.Errorf("redisserver: %w", err)
		}
		s.dir = dir
	}

	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		if s.port, err = childproc.FreePort(); err != nil {
			break
		}
		var busy bool
		if busy, err = s.launch(ctx); err == nil || !busy {
			break
		}
	}
	if err != nil {
		if s.ownDir {
			_ = os.RemoveAll(s.dir)
		}
		return nil, err
	}
	return s, nil
}

// launch starts a process on s.port and waits until it answers. busy reports that it failed
// because the port was taken. The caller holds s.mu.
func (s *Server) launch(ctx context.Context) (busy bool, err error) {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return false, fmt.Errorf("redisserver: %w", err)
	}
	logPath := filepath.Join(s.dir, logName)
	// The server's stdout and stderr go to its log file: configuration errors are printed
	// before the log file is opened, and a file needs no copying goroutine that could outlive
	// the process.
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return false, fmt.Errorf("redisserver: %w", err)
	}
	var logStart int64
	if fi, err := logf.Stat(); err == nil {
		logStart = fi.Size()
	}
	args := append([]string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--logfile", logPath,
	}, s.args...)
	// Not exec.CommandContext: ctx bounds the start, not the life of the server.
	cmd := exec.Command(s.binary, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	logf.Close()
	if err != nil {
		return false, fmt.Errorf("redisserver: %w", err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	s.proc, s.paused = p, false

	if err := waitReady(ctx, s.Addr(), p); err != nil {
		s.kill()
		tail := childproc.LogSince(logPath, logStart, logTailBytes)
		busy := strings.Contains(tail, "Address already in use")
		return busy, fmt.Errorf("redisserver: start %s on %s: %w\n--- %s ---\n%s",
			s.binary, s.Addr(), err, logPath, tail)
	}
	return false, nil
}

// waitReady polls addr until the server there answers as process p. Checking the pid matters
// because, if another process holds the port, our server exits while the other one answers.
func waitReady(ctx context.Context, addr string, p *proc) error {
	const poll = 10 * time.Millisecond
	want := strconv.Itoa(p.cmd.Process.Pid)
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		// One probe must not use up the whole budget on a server that accepts but never
		// answers.
		probeCtx, cancel := context.WithTimeout(ctx, time.Second)
		info, err := serverInfo(probeCtx, addr)
		cancel()
		if err == nil {
			if info["process_id"] == want {
				return nil
			}
			err = fmt.Errorf("%s is process %s, not %s", addr, info["process_id"], want)
		}
		select {
		case <-p.done:
			return fmt.Errorf("redis-server exited: %v", p.waitErr)
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-tick.C:
		}
	}
}

// Addr returns the server's "127.0.0.1:port" address.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port returns the server's TCP port. It does not change across restarts.
func (s *Server) Port() int { return s.port }

// Dir returns the server's data dir, which holds its log file redis.log.
func (s *Server) Dir() string { return s.dir }

// Pid returns the process id of the latest run, which changes with [Server.Restart].
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc.cmd.Process.Pid
}

// running reports whether the latest process has not exited. The caller holds s.mu.
func (s *Server) running() bool {
	select {
	case <-s.proc.done:
		return false
	default:
		return true
	}
}

// Pause stops the process with SIGSTOP. The kernel still accepts connections to a paused
// server; only replies stop.
func (s *Server) Pause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	s.paused = true
	return nil
}

// Resume continues a paused process with SIGCONT. Commands sent while it was paused are then
// executed, even if their clients have given up.
func (s *Server) Resume() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.signal(syscall.SIGCONT); err != nil {
		return err
	}
	s.paused = false
	return nil
}

// signal sends sig to a running process. The caller holds s.mu.
func (s *Server) signal(sig os.Signal) error {
	if !s.running() {
		return fmt.Errorf("redisserver: %s is not running", s.Addr())
	}
	if err := s.proc.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("redisserver: %w", err)
	}
	return nil
}

// Kill ends the process with SIGKILL and returns once it has been reaped. Killing a server that
// is not running does nothing.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kill()
	return nil
}

// kill is Kill with s.mu held.
func (s *Server) kill() {
	if !s.running() {
		return
	}
	killGroup(s.proc.cmd.Process)
	<-s.proc.done
	s.paused = false
}

// killGroup sends SIGKILL to the process group led by p, falling back to p alone.
func killGroup(p *os.Process) {
	if err := syscall.Kill(-p.Pid, syscall.SIGKILL); err != nil {
		_ = p.Kill()
	}
}

// Restart starts the server again on the same port and dir, with the same arguments, after
// [Server.Kill] or [Server.Stop], and waits as [Start] does. It fails if the server is running.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running() {
		return fmt.Errorf("redisserver: restart %s: still running", s.Addr())
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	_, err := s.launch(ctx)
	return err
}

// Stop shuts the server down with SIGTERM, escalating to SIGKILL after 2 s, and removes the
// data dir if Start created it. It may be called any number of times, also after Kill.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running() {
		// A stopped process would hold SIGTERM until the timeout ran out.
		if s.paused {
			_ = s.proc.cmd.Process.Signal(syscall.SIGCONT)
			s.paused = false
		}
		_ = s.proc.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.proc.done:
		case <-time.After(stopTimeout):
			s.kill()
		}
	}
	if s.ownDir {
		if err := os.RemoveAll(s.dir); err != nil {
			return fmt.Errorf("redisserver: %w", err)
		}
	}
	return nil
}

// Version returns redis_version from INFO server.
func (s *Server) Version(ctx context.Context) (string, error) {
	info, err := serverInfo(ctx, s.Addr())
	if err != nil {
		return "", fmt.Errorf("redisserver: version: %w", err)
	}
	v, ok := info["redis_version"]
	if !ok {
		return "", fmt.Errorf("redisserver: %s: INFO server has no redis_version", s.Addr())
	}
	return v, nil
}
