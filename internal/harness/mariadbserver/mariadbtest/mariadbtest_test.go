package mariadbtest

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/internal/harness/childproc/childproctest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := StopShared(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

// TestSharedAndNewDatabase: one server per test binary, a fresh database per call, dropped
// when its test ends.
func TestSharedAndNewDatabase(t *testing.T) {
	srv := Shared(t)
	assert.Same(t, srv, Shared(t), "one server per test binary")

	var names []string
	t.Run("owner", func(t *testing.T) {
		for range 2 {
			db := Open(t, NewDatabase(t, srv))
			var name string
			require.NoError(t, db.QueryRowContext(t.Context(), "SELECT DATABASE()").Scan(&name))
			assert.True(t, strings.HasPrefix(name, "t_testsharedandnewdatabase_owner_"), name)
			_, err := db.ExecContext(t.Context(), "CREATE TABLE mine (v int)")
			require.NoError(t, err, "each database starts empty")
			names = append(names, name)
		}
	})
	require.Len(t, names, 2)
	assert.NotEqual(t, names[0], names[1])
	db := Open(t, srv.DSN(""))
	var n int
	require.NoError(t, db.QueryRowContext(t.Context(),
		"SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME IN (?, ?)", names[0], names[1]).Scan(&n))
	assert.Zero(t, n, "the databases were dropped when their test ended")
}

func TestDatabaseName(t *testing.T) {
	name := databaseName(strings.Repeat("Ä very long sub-test name/", 5), 12)
	assert.LessOrEqual(t, len(name), 64)
	assert.True(t, strings.HasPrefix(name, "t___very_long_sub_test_name_"), name)
	assert.True(t, strings.HasSuffix(name, "_12"), name)
}

func TestMissingServer(t *testing.T) {
	childproctest.CheckMissing(t, install, map[string]func(testing.TB){
		"Shared": func(t testing.TB) {
			// A fresh start: the helper must look for the binaries, not reuse a server.
			shared.mu.Lock()
			started, srv, err := shared.started, shared.srv, shared.err
			shared.started, shared.srv, shared.err = false, nil, nil
			shared.mu.Unlock()
			defer func() {
				shared.mu.Lock()
				shared.started, shared.srv, shared.err = started, srv, err
				shared.mu.Unlock()
			}()
			Shared(t)
		},
	})
}
