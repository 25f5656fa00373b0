// Package mariadbserver starts throw-away MariaDB servers on the loopback interface, for
// integration tests (through [quorumlock.dev/internal/harness/mariadbserver/mariadbtest]). Each
// [Server] is a data dir made by mariadb-install-db and one mariadbd run in the foreground as our
// child process, on a free 127.0.0.1 port and a socket of its own, with a root user that needs
// no password and durability switched off for speed. It does not install MariaDB, keep data
// across a crash, replicate, or shape network traffic; network faults belong to
// [quorumlock.dev/internal/harness/faultproxy].
package mariadbserver

import (
	"context"
	"database/sql"
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

	"github.com/go-sql-driver/mysql"

	"quorumlock.dev/internal/harness/childproc"
)

// ErrNotInstalled is returned by [Start] when mariadb-install-db or mariadbd is not found on
// PATH.
var ErrNotInstalled = errors.New("mariadbserver: mariadb-install-db or mariadbd not found on PATH")

const (
	// startTimeout bounds mariadb-install-db plus the wait for the first connection, when ctx
	// allows more: both are seconds on an idle machine, and tests share two cores.
	startTimeout = 90 * time.Second
	// stopTimeout is how long a normal shutdown (SIGTERM) may take before SIGKILL.
	stopTimeout = 10 * time.Second
	logName     = "mariadbd.log"
	// installTailBytes bounds the output of a failed mariadb-install-db in an error.
	installTailBytes = 4 << 10
)

// Options configures [Start]. The zero value starts a server on a fresh temporary data dir.
type Options struct {
	// Dir holds the data dir (Dir/data), the socket (Dir/run) and the server's log
	// (Dir/mariadbd.log). If empty, Start creates a temporary dir and Stop removes it. A Dir
	// that already holds a data dir is reused without mariadb-install-db, and Stop keeps it.
	// The socket path must stay under the kernel's limit of about 100 bytes: keep Dir short.
	Dir string
}

// Server is a mariadbd, our child process, and its data dir. Its methods are safe for
// concurrent use.
type Server struct {
	dir, dataDir, sockDir string
	ownDir                bool
	proc                  *childproc.Process

	mu      sync.Mutex
	stopped bool
}

// Start creates a data dir with mariadb-install-db (unless Options.Dir holds one), runs
// mariadbd in the foreground on a free loopback port, and returns once a connection to it
// works, or when ctx ends, or after 90 s. The process outlives ctx: ctx bounds only the start,
// and the caller ends the process with [Server.Stop]. On failure nothing keeps running, and
// the error carries the end of mariadb-install-db's output or of the server's log.
func Start(ctx context.Context, opt Options) (*Server, error) {
	install, err := lookPath("mariadb-install-db", "mysql_install_db")
	if err != nil {
		return nil, err
	}
	mariadbd, err := lookPath("mariadbd", "mysqld")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: opt.Dir}
	if s.dir == "" {
		if s.dir, err = os.MkdirTemp("", "mariadb-"); err != nil {
			return nil, fmt.Errorf("mariadbserver: %w", err)
		}
		s.ownDir = true
	} else if s.dir, err = filepath.Abs(s.dir); err != nil {
		return nil, fmt.Errorf("mariadbserver: %w", err)
	}
	s.dataDir = filepath.Join(s.dir, "data")
	s.sockDir = filepath.Join(s.dir, "run")

	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if err := s.prepare(ctx, install); err != nil {
		_ = s.removeDir()
		return nil, err
	}
	if s.proc, err = s.launch(ctx, mariadbd); err != nil {
		_ = s.removeDir()
		return nil, err
	}
	return s, nil
}

// lookPath finds the first of names on PATH: Debian's MariaDB ships both the mariadb names and
// the older mysql ones, other builds only one of them.
func lookPath(names ...string) (string, error) {
	for _, name := range names {
		if path, err := exec.LookPath(name); err == nil {
			return path, nil
		}
	}
	return "", ErrNotInstalled
}

// asRoot returns the option that lets mariadbd run as root, which it otherwise refuses, when
// we are root; none otherwise.
func asRoot() []string {
	if os.Geteuid() == 0 {
		return []string{"--user=root"}
	}
	return nil
}

// prepare creates the socket dir and, unless the data dir holds one, runs mariadb-install-db.
func (s *Server) prepare(ctx context.Context, install string) error {
	for _, d := range []string{s.dataDir, s.sockDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("mariadbserver: %w", err)
		}
	}
	if _, err := os.Stat(filepath.Join(s.dataDir, "mysql")); err == nil {
		return nil
	}
	// --auth-root-authentication-method=normal: root@127.0.0.1 with no password, which a test
	// reaches over TCP (the default would admit the OS user root over the socket only).
	args := append([]string{"--no-defaults", "--datadir=" + s.dataDir,
		"--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve"}, asRoot()...)
	cmd := exec.CommandContext(ctx, install, args...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = childproc.SysProcAttr(nil)
	// The whole group: the script runs a bootstrap mariadbd of its own.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mariadbserver: mariadb-install-db %s: %w\n%s", s.dataDir, errors.Join(err, ctx.Err()), out[max(0, len(out)-installTailBytes):])
	}
	return nil
}

// launch starts mariadbd and waits until it accepts a connection.
func (s *Server) launch(ctx context.Context, mariadbd string) (*childproc.Process, error) {
	p, err := childproc.Start(ctx, childproc.Spec{
		Path: mariadbd,
		Args: func(port int) []string {
			return append([]string{
				// First, or mariadbd reads /etc/mysql and the packaged server's settings.
				"--no-defaults",
				"--datadir=" + s.dataDir,
				"--socket=" + filepath.Join(s.sockDir, "mysqld.sock"),
				"--pid-file=" + filepath.Join(s.sockDir, "mariadbd.pid"),
				"--tmpdir=" + s.dir,
				"--port=" + strconv.Itoa(port),
				"--bind-address=127.0.0.1",
				"--skip-name-resolve",
				// Durability off, for test speed: the data is thrown away with the server.
				"--innodb-flush-log-at-trx-commit=0",
				"--innodb-doublewrite=0",
				"--skip-log-bin",
				// A quarter of the default: many test packages may each run a server.
				"--innodb-buffer-pool-size=32M",
			}, asRoot()...)
		},
		Dir: s.dir,
		// Without --log-error the server logs to stderr.
		Log:   filepath.Join(s.dir, logName),
		Ready: s.ready,
	})
	if err != nil {
		return nil, fmt.Errorf("mariadbserver: %w", err)
	}
	return p, nil
}

// ready reports whether a connection to p's port works and the server there serves our data
// dir.
func (s *Server) ready(ctx context.Context, p *childproc.Process) error {
	db, err := sql.Open("mysql", dsn(p.Port(), ""))
	if err != nil {
		return err
	}
	defer db.Close()
	var dataDir string
	if err := db.QueryRowContext(ctx, "SELECT @@datadir").Scan(&dataDir); err != nil {
		return err
	}
	if filepath.Clean(dataDir) != s.dataDir {
		return fmt.Errorf("port %d serves %s, not %s", p.Port(), dataDir, s.dataDir)
	}
	return nil
}

// Addr returns the server's "127.0.0.1:port" address.
func (s *Server) Addr() string { return addr(s.proc.Port()) }

func addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// DSN returns a data source name of github.com/go-sql-driver/mysql for database db on the
// server (none if db is empty), as root, over TCP: root@tcp(127.0.0.1:PORT)/db. Parameters
// may follow, after a "?".
func (s *Server) DSN(db string) string { return dsn(s.proc.Port(), db) }

func dsn(port int, db string) string {
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net = "tcp"
	cfg.Addr = addr(port)
	cfg.DBName = db
	return cfg.FormatDSN()
}

// Dir returns the dir that holds the data dir (Dir/data) and the server's log
// (Dir/mariadbd.log).
func (s *Server) Dir() string { return s.dir }

// Pid returns the process id of mariadbd, which serves every connection on a thread.
func (s *Server) Pid() int { return s.proc.Pid() }

// Stop shuts the server down (SIGTERM, a normal shutdown), escalating to SIGKILL after 10 s,
// and removes the dir if Start created it. It may be called any number of times.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil
	}
	s.stopped = true
	s.proc.Stop(syscall.SIGTERM, stopTimeout)
	return s.removeDir()
}

// removeDir removes the dir if Start created it.
func (s *Server) removeDir() error {
	if !s.ownDir {
		return nil
	}
	if err := os.RemoveAll(s.dir); err != nil {
		return fmt.Errorf("mariadbserver: %w", err)
	}
	return nil
}

// CreateDatabase creates database name on the server.
func (s *Server) CreateDatabase(ctx context.Context, name string) error {
	db, err := sql.Open("mysql", s.DSN(""))
	if err != nil {
		return fmt.Errorf("mariadbserver: create database %q: %w", name, err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+QuoteName(name)); err != nil {
		return fmt.Errorf("mariadbserver: create database %q: %w", name, err)
	}
	return nil
}

// QuoteName quotes name as a MariaDB identifier: `name`, with each ` doubled.
func QuoteName(name string) string {
	b := []byte{'`'}
	for i := 0; i < len(name); i++ {
		if name[i] == '`' {
			b = append(b, '`')
		}
		b = append(b, name[i])
	}
	return string(append(b, '`'))
}
