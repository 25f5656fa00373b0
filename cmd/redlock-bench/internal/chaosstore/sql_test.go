package chaosstore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/cmd/redlock-bench/internal/chaoscheck"
	"quorumlock.dev/internal/harness/mariadbserver/mariadbtest"
)

// TestMain stops the MariaDB server that the tests share.
func TestMain(m *testing.M) {
	code := m.Run()
	if err := mariadbtest.StopShared(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

// TestDatabaseStores: the MySQL and SQLite stores answer as the memory store does (TestMemStore;
// the PostgreSQL store runs in package chaos's TestPostgresStore):
// an older fence refused on claim and write, an equal one taken, the shadow rows unchecked;
// Final reads the rows back in order, and Close drops the tables.
func TestDatabaseStores(t *testing.T) {
	for _, tc := range []struct {
		name, kind string
		dsn        func(t *testing.T) string
	}{
		{"mariadb", MySQL, func(t *testing.T) string { return mariadbtest.NewDatabase(t, mariadbtest.Shared(t)) }},
		{"sqlite", SQLite, func(t *testing.T) string { return filepath.Join(t.TempDir(), "store.db") }},
		{"sqlite in a dir of its own", SQLite, func(*testing.T) string { return "" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s, err := Start(ctx, Spec{Kind: tc.kind, DSN: tc.dsn(t)}, []string{"r", "other"})
			require.NoError(t, err)
			closed := false
			t.Cleanup(func() {
				if !closed {
					s.Close()
				}
			})
			b, err := Dial(ctx, s.Addr())
			require.NoError(t, err)
			call := func(kind string, f uint64, job int64) Answer {
				a, err := b.Call(ctx, kind, "r", f, job, 1)
				require.NoError(t, err)
				return a
			}
			assert.Equal(t, Answer{Outcome: chaoscheck.OK, Job: 0}, call("claim", 5, 0))
			assert.Equal(t, chaoscheck.OK, call("write", 5, 0).Outcome)
			assert.Equal(t, Answer{Outcome: chaoscheck.OK, Job: 1}, call("claim", 7, 0))
			assert.Equal(t, Answer{Outcome: chaoscheck.OK, Job: 1}, call("claim", 7, 0), "an equal fence claims again")
			assert.Equal(t, chaoscheck.Rejected, call("write", 5, 1).Outcome)
			assert.Equal(t, chaoscheck.Rejected, call("claim", 6, 0).Outcome)
			assert.Equal(t, chaoscheck.OK, call("write", 7, 1).Outcome)
			call("shadow-write", 0, 0)
			call("shadow-write", 0, 0)
			assert.Equal(t, int64(2), call("shadow-read", 0, 0).Job)

			f, err := s.Final(ctx)
			require.NoError(t, err)
			assert.Equal(t, []chaoscheck.Entry{{Job: 0, Fence: 5, Worker: 1}, {Job: 1, Fence: 7, Worker: 1}}, f.Fenced["r"])
			assert.Equal(t, []chaoscheck.Entry{{Job: 0, Worker: 1}, {Job: 0, Worker: 1}}, f.Shadow["r"])
			assert.Empty(t, f.Fenced["other"])

			s.Close()
			closed = true
			if s.dir != "" {
				assert.NoDirExists(t, s.dir, "the store's temporary dir is removed")
			}
		})
	}
}
