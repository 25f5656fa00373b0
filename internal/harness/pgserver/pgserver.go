// Package pgserver starts and controls throw-away PostgreSQL servers on the loopback interface,
// for integration tests (through [quorumlock.dev/internal/harness/pgtest]). Each [Server] is a cluster
// made by initdb and one postmaster run in the foreground as our child process, on a free
// 127.0.0.1 port, with trust authentication and durability switched off for speed; it can be
// paused to inject a hung database. It does not install PostgreSQL, keep data across a crash,
// replicate, or shape network traffic; network faults belong to
// [quorumlock.dev/internal/harness/faultproxy].
package pgserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"quorumlock.dev/internal/harness/childproc"
)

// ErrNotInstalled is returned by [Start] when initdb or postgres is not found on PATH.
var ErrNotInstalled = errors.New("pgserver: initdb or postgres not found on PATH")

// superuser is the database superuser initdb creates, whom [Server.DSN] connects as, and the
// OS user that runs the server when we are root, as PostgreSQL's packages name both.
const superuser = "postgres"

const (
	// startTimeout bounds initdb plus the wait for the first connection, when ctx allows more.
	startTimeout = 60 * time.Second
	stopTimeout  = 5 * time.Second
	logName      = "postgres.log"
	// initdbTailBytes bounds the output of a failed initdb in an error.
	initdbTailBytes = 4 << 10
)

// Options configures [Start]. The zero value starts a server on a fresh temporary cluster.
type Options struct {
	// Dir holds the cluster (Dir/data), the Unix socket (Dir/run) and the server's log
	// (Dir/postgres.log). If empty, Start creates a temporary dir and Stop removes it. A Dir
	// that already holds a cluster is reused without initdb, so that a server can be started
	// again on the data of one that was stopped; Stop keeps it. The socket path must stay
	// under the kernel's limit of about 100 bytes, so keep Dir short. When this process runs as
	// root, the server runs as the OS user "postgres", which must be able to reach Dir.
	Dir string
	// Autovacuum runs the server's autovacuum, and with it its automatic ANALYZE, as a
	// production server does. Off by default, so that no background work competes with a
	// timing-sensitive test. A run that grows a table for minutes needs it: without
	// statistics, the generic plan a connection caches for a prepared query while the table
	// is small (a sequential scan) is never replanned, and every later execution reads the
	// whole table.
	Autovacuum bool
}

// Server is a PostgreSQL postmaster, our child process, and its cluster. Its methods are safe
// for concurrent use.
type Server struct {
	dir, dataDir, sockDir string
	ownDir                bool
	autovacuum            bool
	cred                  *syscall.Credential // nil: run as ourselves
	proc                  *childproc.Process

	mu      sync.Mutex
	stopped bool
}

// Start creates a cluster with initdb (unless Options.Dir holds one), runs postgres in the
// foreground on a free loopback port, and returns once a connection to it works, or when ctx
// ends, or after 60 s. The process outlives ctx: ctx bounds only the start, and the caller
// ends the process with [Server.Stop]. On failure nothing keeps running, and the error carries
// the end of initdb's output or of the server's log.
func Start(ctx context.Context, opt Options) (*Server, error) {
	initdb, err := exec.LookPath("initdb")
	if err != nil {
		return nil, ErrNotInstalled
	}
	postgres, err := exec.LookPath("postgres")
	if err != nil {
		return nil, ErrNotInstalled
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	s := &Server{dir: opt.Dir, cred: cred, autovacuum: opt.Autovacuum}
	if s.dir == "" {
		if s.dir, err = os.MkdirTemp("", "pgserver-"); err != nil {
			return nil, fmt.Errorf("pgserver: %w", err)
		}
		s.ownDir = true
		// Our temporary dir is the server's: postgres, not root, must be able to enter it.
		if err := s.chown(s.dir); err != nil {
			_ = s.removeDir()
			return nil, err
		}
	} else if s.dir, err = filepath.Abs(s.dir); err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	s.dataDir = filepath.Join(s.dir, "data")
	s.sockDir = filepath.Join(s.dir, "run")

	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if err := s.prepare(ctx, initdb); err != nil {
		_ = s.removeDir()
		return nil, err
	}
	if s.proc, err = s.launch(ctx, postgres); err != nil {
		_ = s.removeDir()
		return nil, err
	}
	return s, nil
}

// serverCredential returns the OS user to run initdb and postgres as: nil (ourselves) unless we
// are root, which postgres refuses to run as.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(superuser)
	if err != nil {
		return nil, fmt.Errorf("pgserver: running as root, the server needs the OS user %q, which PostgreSQL's packages create: %w", superuser, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgserver: uid of %q: %w", superuser, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgserver: gid of %q: %w", superuser, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// chown gives path to the server's OS user when it is not ourselves.
func (s *Server) chown(path string) error {
	if s.cred == nil {
		return nil
	}
	if err := os.Chown(path, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	return nil
}

// prepare creates the socket dir and, unless the data dir holds a cluster, runs initdb.
func (s *Server) prepare(ctx context.Context, initdb string) error {
	for _, d := range []string{s.dataDir, s.sockDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("pgserver: %w", err)
		}
		if err := s.chown(d); err != nil {
			return err
		}
	}
	if _, err := os.Stat(filepath.Join(s.dataDir, "PG_VERSION")); err == nil {
		return nil
	}
	// --no-sync: a test cluster need not survive a crash of the machine, and syncing it costs
	// seconds.
	cmd := exec.CommandContext(ctx, initdb,
		"-D", s.dataDir, "-U", superuser, "-A", "trust", "-E", "UTF8", "--locale=C",
		"--no-sync", "--no-instructions")
	cmd.Dir = s.dir
	cmd.SysProcAttr = childproc.SysProcAttr(s.cred)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgserver: initdb %s: %w\n%s", s.dataDir, errors.Join(err, ctx.Err()), tail(out))
	}
	return nil
}

// launch starts the postmaster and waits until it accepts a connection.
func (s *Server) launch(ctx context.Context, postgres string) (*childproc.Process, error) {
	// Not pg_ctl, which daemonises: the postmaster stays our child, so we own its pid and reap
	// it.
	p, err := childproc.Start(ctx, childproc.Spec{
		Path: postgres,
		Args: func(port int) []string {
			return []string{
				"-D", s.dataDir,
				"-p", strconv.Itoa(port),
				"-k", s.sockDir,
				"-c", "listen_addresses=127.0.0.1",
				// Durability off, for test speed: the data is thrown away with the server,
				// and flushing to disk would cost more than the queries the tests run.
				"-c", "fsync=off",
				"-c", "synchronous_commit=off",
				"-c", "full_page_writes=off",
				// A quarter of the default: many test packages may each run a server on one
				// machine.
				"-c", "shared_buffers=32MB",
				// No background work that a test did not ask for: fewer processes to pause,
				// and no vacuum competing with a timing-sensitive test.
				"-c", "autovacuum=" + onOff(s.autovacuum),
			}
		},
		Dir: s.dir,
		// The server logs to stderr.
		Log:        filepath.Join(s.dir, logName),
		Credential: s.cred,
		Ready:      s.ready,
	})
	if err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	return p, nil
}

// ready reports whether a connection to p's port works and the server there serves our data
// dir.
func (s *Server) ready(ctx context.Context, p *childproc.Process) error {
	conn, err := pgx.Connect(ctx, dsn(p.Port(), "postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var dataDir string
	if err := conn.QueryRow(ctx, "SHOW data_directory").Scan(&dataDir); err != nil {
		return err
	}
	if dataDir != s.dataDir {
		return fmt.Errorf("port %d serves %s, not %s", p.Port(), dataDir, s.dataDir)
	}
	return nil
}

// tail returns at most the last initdbTailBytes of b.
func tail(b []byte) string {
	return string(b[max(0, len(b)-initdbTailBytes):])
}

// Addr returns the server's "127.0.0.1:port" address.
func (s *Server) Addr() string { return addr(s.proc.Port()) }

func addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// DSN returns a connection URL for database db on the server, as the superuser, over TCP
// without TLS: postgres://postgres@127.0.0.1:PORT/db?sslmode=disable.
func (s *Server) DSN(db string) string { return dsn(s.proc.Port(), db) }

func dsn(port int, db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(superuser),
		Host:     addr(port),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Dir returns the dir that holds the cluster (Dir/data) and the server's log (Dir/postgres.log).
func (s *Server) Dir() string { return s.dir }

// Pid returns the process id of the postmaster. Its children (one backend per connection,
// and background workers) have pids of their own.
func (s *Server) Pid() int { return s.proc.Pid() }

// Pause stops the postmaster and each of its children with SIGSTOP, so that existing
// connections get no answers and new ones are accepted by the kernel but never served. Pausing
// a paused server does nothing. Outside Linux, only the postmaster is paused. If our process
// dies while the server is paused, a shell that Pause started kills the server's processes.
func (s *Server) Pause() error {
	if err := s.proc.Pause(); err != nil {
		return fmt.Errorf("pgserver: %s: %w", s.Addr(), err)
	}
	return nil
}

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() error {
	if err := s.proc.Resume(); err != nil {
		return fmt.Errorf("pgserver: %s: %w", s.Addr(), err)
	}
	return nil
}

// Stop shuts the server down (fast shutdown: SIGINT, which ends open sessions instead of
// waiting for them as SIGTERM would), escalating to SIGKILL after 5 s, and removes the
// dir if Start created it. It may be called any number of times.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil
	}
	s.stopped = true
	s.proc.Stop(syscall.SIGINT, stopTimeout)
	return s.removeDir()
}

// removeDir removes the dir if Start created it.
func (s *Server) removeDir() error {
	if !s.ownDir {
		return nil
	}
	if err := os.RemoveAll(s.dir); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	return nil
}

// CreateDatabase creates database name, copied from template1, on the server. It takes 50 to
// 300 ms, most of it creating the few hundred files of the new database.
func (s *Server) CreateDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return fmt.Errorf("pgserver: create database %q: %w", name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("pgserver: create database %q: %w", name, err)
	}
	return nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
