// Package pgtest gives tests real PostgreSQL servers, started through
// [quorumlock.dev/internal/harness/pgserver], a fresh database per test, and pgx pools closed when the
// test ends. A missing initdb or postgres fails the test when CI is "true" and skips it
// elsewhere. It does not provide fakes.
//
// initdb costs one to two seconds and a database 50 to 300 ms, so a test package shares one
// server and gives each test a database of its own: [Shared] starts the server on first use,
// [NewDatabase] creates the test's database and drops it when the test ends, and the package's
// TestMain stops the server after the tests ran:
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		if err := pgtest.StopShared(); err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			code = 1
//		}
//		os.Exit(code)
//	}
//
// A package whose TestMain forgets StopShared still leaves no server running (the kernel kills
// it with the test binary, see pgserver), but leaves its temporary dir behind. A test that
// pauses or stops a server starts its own with [Start].
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"quorumlock.dev/internal/harness/childproc/childproctest"
	"quorumlock.dev/internal/harness/pgserver"
)

// cleanupTimeout bounds the work a test's cleanup does on the server.
const cleanupTimeout = 10 * time.Second

// Start starts a server for the test alone and stops it when the test ends. If initdb or
// postgres is not installed, it fails the test when the environment variable CI is "true",
// since in CI a missing server means the suite silently tested nothing, and skips it
// otherwise.
func Start(t testing.TB) *pgserver.Server {
	t.Helper()
	srv, err := pgserver.Start(t.Context(), pgserver.Options{})
	if errors.Is(err, pgserver.ErrNotInstalled) {
		missing(t, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Errorf("pgtest: stop %s: %v", srv.Addr(), err)
		}
	})
	return srv
}

var shared struct {
	mu      sync.Mutex
	srv     *pgserver.Server
	err     error // of the one start; not retried
	started bool
}

// Shared returns the test binary's shared server, starting it on the first call. The server
// outlives the test; [StopShared] stops it. A missing installation is handled as in [Start];
// a server that failed to start fails every test that asks for it.
func Shared(t testing.TB) *pgserver.Server {
	t.Helper()
	shared.mu.Lock()
	if !shared.started {
		shared.started = true
		// Not the test's context: it would bound nothing more than Start's own timeout, and
		// the server serves later tests too.
		shared.srv, shared.err = pgserver.Start(context.Background(), pgserver.Options{})
	}
	srv, err := shared.srv, shared.err
	shared.mu.Unlock()
	if errors.Is(err, pgserver.ErrNotInstalled) {
		missing(t, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// StopShared stops the shared server, if [Shared] started one. Call it from TestMain after
// m.Run.
func StopShared() error {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.srv == nil {
		return nil
	}
	return shared.srv.Stop()
}

// Need fails or skips the test, by the rules of [Start], when initdb or postgres is not
// installed: for tests that start servers through other code.
func Need(t testing.TB) {
	t.Helper()
	for _, bin := range []string{"initdb", "postgres"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing(t, pgserver.ErrNotInstalled)
		}
	}
}

func missing(t testing.TB, err error) {
	t.Helper()
	childproctest.Missing(t, err, "apt-get install postgresql, and put its bin dir (/usr/lib/postgresql/<version>/bin) on PATH")
}

var databases atomic.Uint64

// NewDatabase creates a database of its own for the test on srv, drops it when the test ends,
// and returns its DSN. Its name comes from the test's name, made unique in the process.
func NewDatabase(t testing.TB, srv *pgserver.Server) string {
	t.Helper()
	name := databaseName(t.Name(), databases.Add(1))
	if err := srv.CreateDatabase(t.Context(), name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		// Dropping keeps a shared server's disk use flat over a long package. FORCE ends
		// the sessions that the test left open.
		conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
		if err == nil {
			defer conn.Close(ctx)
			_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		}
		if err != nil {
			// Housekeeping, not the test's outcome: a test may have stopped the server.
			t.Logf("pgtest: drop database %s: %v", name, err)
		}
	})
	return srv.DSN(name)
}

// databaseName makes a database name from a test name and a number unique in the process,
// within PostgreSQL's 63 bytes.
func databaseName(test string, n uint64) string {
	suffix := fmt.Sprintf("_%d", n)
	var b strings.Builder
	b.WriteString("t_")
	for _, r := range strings.ToLower(test) {
		if b.Len()+len(suffix) >= 63 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	b.WriteString(suffix)
	return b.String()
}

// Pool returns a pool for dsn that is closed when the test ends. It fails the test if no
// connection can be made.
func Pool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := pool.Ping(t.Context()); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return pool
}
