// Package mariadbtest gives tests real MariaDB servers, started through
// [quorumlock.dev/internal/harness/mariadbserver], a fresh database per test, and database/sql
// handles closed when the test ends. A missing mariadb-install-db or mariadbd fails the test
// when CI is "true" and skips it elsewhere. It does not provide fakes.
//
// A server costs two to three seconds to create, a database a few milliseconds, so a test
// package shares one server ([Shared]) and gives each test a database of its own
// ([NewDatabase]); its TestMain stops the server after the tests ran:
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		if err := mariadbtest.StopShared(); err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			code = 1
//		}
//		os.Exit(code)
//	}
//
// A package whose TestMain forgets StopShared still leaves no server running (the kernel kills
// it with the test binary), but leaves its temporary dir behind.
package mariadbtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // the "mysql" driver of database/sql

	"quorumlock.dev/internal/harness/childproc/childproctest"
	"quorumlock.dev/internal/harness/mariadbserver"
)

// cleanupTimeout bounds the work a test's cleanup does on the server.
const cleanupTimeout = 10 * time.Second

// install is what a missing server's message tells the reader to do.
const install = "apt-get install mariadb-server"

var shared struct {
	mu      sync.Mutex
	srv     *mariadbserver.Server
	err     error // of the one start; not retried
	started bool
}

// Shared returns the test binary's shared server, starting it on the first call. The server
// outlives the test; [StopShared] stops it. If MariaDB is not installed, it fails the test when
// the environment variable CI is "true", since in CI a missing server means the suite silently
// tested nothing, and skips it otherwise; a server that failed to start fails every test that
// asks for it.
func Shared(t testing.TB) *mariadbserver.Server {
	t.Helper()
	shared.mu.Lock()
	if !shared.started {
		shared.started = true
		// Not the test's context: the server serves later tests too.
		shared.srv, shared.err = mariadbserver.Start(context.Background(), mariadbserver.Options{})
	}
	srv, err := shared.srv, shared.err
	shared.mu.Unlock()
	if errors.Is(err, mariadbserver.ErrNotInstalled) {
		childproctest.Missing(t, err, install)
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

var databases atomic.Uint64

// NewDatabase creates a database of its own for the test on srv, drops it when the test ends,
// and returns its DSN (see [mariadbserver.Server.DSN]). Its name comes from the test's name,
// made unique in the process.
func NewDatabase(t testing.TB, srv *mariadbserver.Server) string {
	t.Helper()
	name := databaseName(t.Name(), databases.Add(1))
	if err := srv.CreateDatabase(t.Context(), name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		db, err := sql.Open("mysql", srv.DSN(""))
		if err == nil {
			defer db.Close()
			_, err = db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+mariadbserver.QuoteName(name))
		}
		if err != nil {
			// Housekeeping, not the test's outcome.
			t.Logf("mariadbtest: drop database %s: %v", name, err)
		}
	})
	return srv.DSN(name)
}

// databaseName makes a database name from a test name and a number unique in the process,
// within MariaDB's 64 characters.
func databaseName(test string, n uint64) string {
	suffix := fmt.Sprintf("_%d", n)
	var b strings.Builder
	b.WriteString("t_")
	for _, r := range strings.ToLower(test) {
		if b.Len()+len(suffix) >= 64 {
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

// Open returns a database/sql handle for dsn, closed when the test ends. It fails the test if
// no connection can be made.
func Open(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if err := db.PingContext(t.Context()); err != nil {
		t.Fatalf("mariadbtest: %v", err)
	}
	return db
}
