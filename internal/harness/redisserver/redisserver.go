// Package redisserver starts and controls real redis-server processes on the loopback interface,
// for integration tests (through [quorumlock.dev/internal/harness/redistest]) and for the benchmark CLI.
// Each [Server] is one foreground child process on a free port (of 127.0.0.1 by default), without persistence
// unless the caller asks for it, that can be paused, killed and restarted on the same port to
// inject process faults. It does not install Redis, manage replication or clusters, or shape
// network traffic; network faults belong to [quorumlock.dev/internal/harness/faultproxy].
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
	"sync"
	"syscall"
	"time"

	"quorumlock.dev/internal/harness/childproc"
)

// ErrNotInstalled is returned by [Start] when Options.Binary is empty and no redis-server is
// found on PATH.
var ErrNotInstalled = errors.New("redisserver: redis-server not found on PATH")

const (
	readyTimeout = 5 * time.Second
	stopTimeout  = 2 * time.Second
	logName      = "redis.log"
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
	// Host is the address the server binds and is probed on; empty: 127.0.0.1. A server in a
	// network namespace binds its veth address.
	Host string
	// Wrap runs the server through a command prefix, which must exec redis-server in the same
	// process (the readiness probe checks the pid), e.g. ip netns exec NAME.
	Wrap []string
	// Env is added to the server's environment, e.g. an LD_PRELOAD.
	Env []string
	// TLS, when set, makes the server speak only TLS on its port (--tls-port, with --port 0).
	TLS *TLS
	// Password sets --requirepass; the readiness probe and [Server.Version] authenticate
	// with it.
	Password string
}

// TLS names the PEM files of a TLS server. Clients need no certificate of their own
// (--tls-auth-clients no).
type TLS struct {
	CertFile, KeyFile string
	// CAFile, if set, is passed as --tls-ca-cert-file.
	CAFile string
}

// Server is a redis-server child process. Its methods are safe for concurrent use.
type Server struct {
	binary string
	args   []string
	host   string
	wrap   []string
	env    []string
	probe  probe
	dir    string
	ownDir bool
	port   int // 0 until the first run bound one

	mu   sync.Mutex
	proc *childproc.Process // the latest run; nil only while Start runs
}

// Start runs redis-server in the foreground on a free loopback port and returns once the server
// answers PING, or when ctx ends, or after 5 s. The process outlives ctx: ctx bounds only the
// wait, and the caller ends the process with [Server.Stop]. On failure the process is killed and
// the error carries the end of the server's log.
func Start(ctx context.Context, opt Options) (*Server, error) {
	s := &Server{binary: opt.Binary, args: append([]string(nil), opt.Args...), dir: opt.Dir,
		host: opt.Host, wrap: append([]string(nil), opt.Wrap...), env: append([]string(nil), opt.Env...),
		probe: probe{tls: opt.TLS != nil, password: opt.Password}}
	if t := opt.TLS; t != nil {
		// Before the caller's Args, so that they can override these as any default.
		tlsArgs := []string{"--tls-cert-file", t.CertFile, "--tls-key-file", t.KeyFile, "--tls-auth-clients", "no"}
		if t.CAFile != "" {
			tlsArgs = append(tlsArgs, "--tls-ca-cert-file", t.CAFile)
		}
		s.args = append(tlsArgs, s.args...)
	}
	if opt.Password != "" {
		s.args = append([]string{"--requirepass", opt.Password}, s.args...)
	}
	if s.host == "" {
		s.host = "127.0.0.1"
	}
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
	if err := s.launch(ctx); err != nil {
		if s.ownDir {
			_ = os.RemoveAll(s.dir)
		}
		return nil, err
	}
	return s, nil
}

// launch starts a process, on s.port once one was chosen, and waits until it answers. The
// caller holds s.mu.
func (s *Server) launch(ctx context.Context) error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("redisserver: %w", err)
	}
	logPath := filepath.Join(s.dir, logName)
	path, prefix := s.binary, []string(nil)
	if len(s.wrap) > 0 {
		path, prefix = s.wrap[0], append(append([]string(nil), s.wrap[1:]...), s.binary)
	}
	p, err := childproc.Start(ctx, childproc.Spec{
		Path: path,
		Args: func(port int) []string {
			ports := []string{"--port", strconv.Itoa(port)}
			if s.probe.tls {
				ports = []string{"--port", "0", "--tls-port", strconv.Itoa(port)}
			}
			return append(append(append(prefix, ports...),
				"--bind", s.host,
				"--save", "",
				"--appendonly", "no",
				"--dir", s.dir,
				"--logfile", logPath,
			), s.args...)
		},
		Env:  s.env,
		Port: s.port,
		// Also configuration errors, which redis-server prints before it opens --logfile.
		Log:   logPath,
		Ready: s.ready,
	})
	if err != nil {
		return fmt.Errorf("redisserver: %w", err)
	}
	s.proc, s.port = p, p.Port()
	return nil
}

// ready reports whether the server on p's port answers, as process p.
func (s *Server) ready(ctx context.Context, p *childproc.Process) error {
	addr := net.JoinHostPort(s.host, strconv.Itoa(p.Port()))
	info, err := s.probe.serverInfo(ctx, addr)
	if err != nil {
		return err
	}
	if want := strconv.Itoa(p.Pid()); info["process_id"] != want {
		return fmt.Errorf("%s is process %s, not %s", addr, info["process_id"], want)
	}
	return nil
}

// Addr returns the server's "host:port" address (127.0.0.1 unless Options.Host said otherwise).
func (s *Server) Addr() string { return net.JoinHostPort(s.host, strconv.Itoa(s.port)) }

// Port returns the server's TCP port. It does not change across restarts.
func (s *Server) Port() int { return s.port }

// Dir returns the server's data dir, which holds its log file redis.log.
func (s *Server) Dir() string { return s.dir }

// Pid returns the process id of the latest run, which changes with [Server.Restart].
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc.Pid()
}

// Pause stops the process, and a child it forked for a background save, with SIGSTOP. The
// kernel still accepts connections to a paused server; only replies stop.
func (s *Server) Pause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.proc.Pause(); err != nil {
		return fmt.Errorf("redisserver: %s: %w", s.Addr(), err)
	}
	return nil
}

// Resume continues a paused process with SIGCONT. Commands sent while it was paused are then
// executed, even if their clients have given up.
func (s *Server) Resume() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.proc.Resume(); err != nil {
		return fmt.Errorf("redisserver: %s: %w", s.Addr(), err)
	}
	return nil
}

// Kill ends the process with SIGKILL and returns once it has been reaped. Killing a server that
// is not running does nothing.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.proc.Kill()
	return nil
}

// Restart starts the server again on the same port and dir, with the same arguments, after
// [Server.Kill] or [Server.Stop], and waits as [Start] does. It fails if the server is running.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.proc.Done():
	default:
		return fmt.Errorf("redisserver: restart %s: still running", s.Addr())
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	return s.launch(ctx)
}

// Stop shuts the server down with SIGTERM, escalating to SIGKILL after 2 s, and removes the
// data dir if Start created it. It may be called any number of times, also after Kill.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.proc.Stop(syscall.SIGTERM, stopTimeout)
	if s.ownDir {
		if err := os.RemoveAll(s.dir); err != nil {
			return fmt.Errorf("redisserver: %w", err)
		}
	}
	return nil
}

// Version returns redis_version from INFO server.
func (s *Server) Version(ctx context.Context) (string, error) {
	info, err := s.probe.serverInfo(ctx, s.Addr())
	if err != nil {
		return "", fmt.Errorf("redisserver: version: %w", err)
	}
	v, ok := info["redis_version"]
	if !ok {
		return "", fmt.Errorf("redisserver: %s: INFO server has no redis_version", s.Addr())
	}
	return v, nil
}
