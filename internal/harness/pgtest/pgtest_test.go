package pgtest_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/internal/harness/childproc/childproctest"
	"quorumlock.dev/internal/harness/pgtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := pgtest.StopShared(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

func TestSharedAndNewDatabase(t *testing.T) {
	t.Parallel()
	srv := pgtest.Shared(t)
	assert.Same(t, srv, pgtest.Shared(t), "one server per test binary")

	var names []string
	for range 2 {
		dsn := pgtest.NewDatabase(t, srv)
		pool := pgtest.Pool(t, dsn)
		var name string
		require.NoError(t, pool.QueryRow(t.Context(), "SELECT current_database()").Scan(&name))
		assert.True(t, strings.HasPrefix(name, "t_testsharedandnewdatabase_"), name)
		assert.LessOrEqual(t, len(name), 63)
		_, err := pool.Exec(t.Context(), "CREATE TABLE mine (v int)")
		require.NoError(t, err, "each database starts empty")
		names = append(names, name)
	}
	assert.NotEqual(t, names[0], names[1])
}

// TestDatabaseDropped: a test's database is gone once the test ended, even with its pool still
// open.
func TestDatabaseDropped(t *testing.T) {
	t.Parallel()
	srv := pgtest.Shared(t)
	var name string
	t.Run("owner", func(t *testing.T) {
		pool := pgtest.Pool(t, pgtest.NewDatabase(t, srv))
		require.NoError(t, pool.QueryRow(t.Context(), "SELECT current_database()").Scan(&name))
	})
	conn, err := pgx.Connect(t.Context(), srv.DSN("postgres"))
	require.NoError(t, err)
	defer conn.Close(t.Context())
	var exists bool
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", name).Scan(&exists))
	assert.False(t, exists, name)
}

func TestLongTestNameFitsDatabaseName(t *testing.T) {
	t.Parallel()
	t.Run(strings.Repeat("Ä very long sub-test name ", 5), func(t *testing.T) {
		pool := pgtest.Pool(t, pgtest.NewDatabase(t, pgtest.Shared(t)))
		require.NoError(t, pool.Ping(t.Context()))
	})
}

func TestStart(t *testing.T) {
	t.Parallel()
	srv := pgtest.Start(t)
	assert.NotSame(t, pgtest.Shared(t), srv)
	require.NoError(t, pgtest.Pool(t, srv.DSN("postgres")).Ping(t.Context()))
}

func TestMissingServer(t *testing.T) {
	childproctest.CheckMissing(t, "apt-get install postgresql", map[string]func(testing.TB){
		"Start": func(t testing.TB) { pgtest.Start(t) },
		"Need":  pgtest.Need,
	})
}
