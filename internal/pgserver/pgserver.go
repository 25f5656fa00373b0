// Package pgserver starts and controls throw-away PostgreSQL servers on the loopback interface,
// for integration tests (through [quorumlock.dev/internal/pgtest]). Each [Server] is a cluster
// made by initdb and one postmaster run in the foreground as our child process, on a free
// 127.0.0.1 port, with trust authentication and durability switched off for speed; it can be
// paused to inject a hung database. It does not install PostgreSQL, keep data across a crash,
// replicate, or shape network traffic; network faults belong to
// [quorumlock.dev/internal/faultproxy].
package pgserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"quorumlock.dev/internal/childproc"
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
	// startAttempts bounds the retries when another process takes the port between the moment
	// it was found free and the moment postgres binds it.
	startAttempts = 3
	logName       = "postgres.log"
	logTailBytes  = 4 << 10
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
}

// Server is a PostgreSQL postmaster, our child process, and its cluster. Its methods are safe
// for concurrent use.
type Server struct {
	dir, dataDir, sockDir string
	ownDir                bool
	port                  int
	cred                  *syscall.Credential // nil: run as ourselves

	cmd     *exec.Cmd
	done    chan struct{} // closed once cmd.Wait returned
	waitErr error         // valid once done is closed

	mu      sync.Mutex
	paused  []int   // the processes Pause stopped, the postmaster last; nil unless paused
	reaper  *reaper // while paused
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
	s := &Server{dir: opt.Dir, cred: cred}
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
	for attempt := 1; attempt <= startAttempts; attempt++ {
		if s.port, err = childproc.FreePort(); err != nil {
			break
		}
		var busy bool
		if busy, err = s.launch(ctx, postgres); err == nil || !busy {
			break
		}
	}
	if err != nil {
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

// child makes cmd run as the server's OS user, in s.dir, and die with us.
func (s *Server) child(cmd *exec.Cmd) *exec.Cmd {
	cmd.Dir = s.dir
	cmd.SysProcAttr = sysProcAttr(s.cred)
	return cmd
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
	cmd := s.child(exec.CommandContext(ctx, initdb,
		"-D", s.dataDir, "-U", superuser, "-A", "trust", "-E", "UTF8", "--locale=C",
		"--no-sync", "--no-instructions"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgserver: initdb %s: %w\n%s", s.dataDir, errors.Join(err, ctx.Err()), tail(out))
	}
	return nil
}

// launch starts the postmaster on s.port and waits until it accepts a connection. busy reports
// that it failed because the port was taken.
func (s *Server) launch(ctx context.Context, postgres string) (busy bool, err error) {
	logPath := filepath.Join(s.dir, logName)
	// The server logs to stderr, which goes to a file: a file needs no copying goroutine that
	// could outlive the process, and it holds the errors printed before logging is set up.
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return false, fmt.Errorf("pgserver: %w", err)
	}
	var logStart int64
	if fi, err := logf.Stat(); err == nil {
		logStart = fi.Size()
	}
	// Not CommandContext: ctx bounds the start, not the life of the server. Not pg_ctl either,
	// which daemonises: the postmaster stays our child, so we own its pid and reap it.
	cmd := s.child(exec.Command(postgres,
		"-D", s.dataDir,
		"-p", strconv.Itoa(s.port),
		"-k", s.sockDir,
		"-c", "listen_addresses=127.0.0.1",
		// Durability off, for test speed: the data is thrown away with the server, and
		// flushing to disk would cost more than the queries the tests run.
		"-c", "fsync=off",
		"-c", "synchronous_commit=off",
		"-c", "full_page_writes=off",
		// A quarter of the default: many test packages may each run a server on one machine.
		"-c", "shared_buffers=32MB",
		// No background work that a test did not ask for: fewer processes to pause, and no
		// vacuum competing with a timing-sensitive test.
		"-c", "autovacuum=off",
	))
	cmd.Stdout, cmd.Stderr = logf, logf
	err = cmd.Start()
	logf.Close()
	if err != nil {
		return false, fmt.Errorf("pgserver: %w", err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func() {
		s.waitErr = cmd.Wait()
		close(s.done)
	}()

	if err := s.waitReady(ctx); err != nil {
		s.kill()
		log := childproc.LogSince(logPath, logStart, logTailBytes)
		busy := strings.Contains(log, "Address already in use")
		return busy, fmt.Errorf("pgserver: start %s on %s: %w\n--- %s ---\n%s", postgres, s.Addr(), err, logPath, log)
	}
	return false, nil
}

// waitReady polls until a connection to the server works and the server there is ours: if
// another process holds the port, ours exits while the other one answers.
func (s *Server) waitReady(ctx context.Context) error {
	const poll = 20 * time.Millisecond
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		err := s.probe(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("postgres exited: %v", s.waitErr)
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-tick.C:
		}
	}
}

func (s *Server) probe(ctx context.Context) error {
	// One probe must not use up the whole budget on a server that accepts but never answers.
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var dataDir string
	if err := conn.QueryRow(ctx, "SHOW data_directory").Scan(&dataDir); err != nil {
		return err
	}
	if dataDir != s.dataDir {
		return fmt.Errorf("%s serves %s, not %s", s.Addr(), dataDir, s.dataDir)
	}
	return nil
}

// tail returns at most the last logTailBytes of b.
func tail(b []byte) string {
	return string(b[max(0, len(b)-logTailBytes):])
}

// Addr returns the server's "127.0.0.1:port" address.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// DSN returns a connection URL for database db on the server, as the superuser, over TCP
// without TLS: postgres://postgres@127.0.0.1:PORT/db?sslmode=disable.
func (s *Server) DSN(db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(superuser),
		Host:     s.Addr(),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Dir returns the dir that holds the cluster (Dir/data) and the server's log (Dir/postgres.log).
func (s *Server) Dir() string { return s.dir }

// Pid returns the process id of the postmaster. Its children (one backend per connection,
// and background workers) have pids of their own.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// running reports whether the postmaster has not exited.
func (s *Server) running() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// Pause stops the postmaster and each of its children with SIGSTOP, so that existing
// connections get no answers and new ones are accepted by the kernel but never served. Pausing
// a paused server does nothing. Outside Linux, only the postmaster is paused.
//
// If our process dies while the server is paused, a shell that Pause started kills the
// server's processes: the postmaster's children would not notice its death while stopped.
func (s *Server) Pause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running() {
		return fmt.Errorf("pgserver: %s is not running", s.Addr())
	}
	if s.paused != nil {
		return nil
	}
	pid := s.Pid()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("pgserver: pause %d: %w", pid, err)
	}
	// Once the postmaster is stopped it forks no more children, so the list below is complete.
	waitStopped(pid)
	kids := children(pid)
	for _, kid := range kids {
		_ = syscall.Kill(kid, syscall.SIGSTOP) // a child that exits meanwhile needs no pause
	}
	for _, kid := range kids {
		waitStopped(kid)
	}
	s.paused = append(kids, pid)
	s.reaper = startReaper(s.paused)
	return nil
}

// reaper is a shell, outside our process group, that kills a paused server if our process dies
// before it resumes or stops the server: the kernel kills the postmaster with us (Pdeathsig),
// but its stopped children cannot notice, and would stay stopped forever.
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
	args := []string{"-c", `read -r line; [ "$line" = release ] || kill -9 "$@"`, "pgserver-reaper"}
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

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running() {
		return fmt.Errorf("pgserver: %s is not running", s.Addr())
	}
	s.resume()
	return nil
}

// resume is Resume with s.mu held.
func (s *Server) resume() {
	for _, p := range s.paused {
		_ = syscall.Kill(p, syscall.SIGCONT)
	}
	s.paused = nil
	s.reaper.release()
	s.reaper = nil
}

// kill ends the postmaster and its children with SIGKILL and waits until the postmaster is
// reaped. The postmaster is stopped first, so that it cannot fork a child we would miss.
func (s *Server) kill() {
	if !s.running() {
		return
	}
	pid := s.Pid()
	if syscall.Kill(pid, syscall.SIGSTOP) == nil {
		waitStopped(pid)
	}
	for _, kid := range children(pid) {
		_ = syscall.Kill(kid, syscall.SIGKILL)
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.paused = nil
	s.reaper.release()
	s.reaper = nil
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
	if s.running() {
		// A stopped process would hold SIGINT until the timeout ran out.
		if s.paused != nil {
			s.resume()
		}
		_ = s.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-s.done:
		case <-time.After(stopTimeout):
			s.kill()
		}
	}
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
