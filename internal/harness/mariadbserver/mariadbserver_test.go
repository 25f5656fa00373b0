package mariadbserver_test

import (
	"bytes"
	"database/sql"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/internal/harness/mariadbserver"
	"quorumlock.dev/internal/harness/mariadbserver/mariadbtest"
)

// isMariadbd reports whether pid is a live (not zombie) process running mariadbd or mysqld. A
// pid can be reused once its process is reaped, hence the name check.
func isMariadbd(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' {
		return false
	}
	return bytes.Contains(stat[:i], []byte("(mariadbd")) || bytes.Contains(stat[:i], []byte("(mysqld"))
}

// TestLifecycle: a server serves its own data dir on its port, a database created on it is
// reached by its DSN, and Stop ends the process and removes the dir Start made. The shared
// server of mariadbtest stands for Start's zero Options, so that the package starts one server.
func TestLifecycle(t *testing.T) {
	srv := mariadbtest.Shared(t)
	t.Cleanup(func() { _ = mariadbtest.StopShared() })
	ctx := t.Context()

	assert.Equal(t, "root@tcp("+srv.Addr()+")/app", srv.DSN("app"))
	pid := srv.Pid()
	require.True(t, isMariadbd(pid), "process %d", pid)
	require.DirExists(t, srv.Dir()+"/data/mysql")
	require.FileExists(t, srv.Dir()+"/mariadbd.log")

	require.NoError(t, srv.CreateDatabase(ctx, "App DB"))
	require.Error(t, srv.CreateDatabase(ctx, "App DB"), "the database exists")
	db, err := sql.Open("mysql", srv.DSN("App DB"))
	require.NoError(t, err)
	defer db.Close()
	var name, version string
	require.NoError(t, db.QueryRowContext(ctx, "SELECT DATABASE(), VERSION()").Scan(&name, &version))
	assert.Equal(t, "App DB", name)
	assert.Contains(t, version, "MariaDB")
	t.Logf("server %s", version)

	dir := srv.Dir()
	start := time.Now()
	require.NoError(t, mariadbtest.StopShared())
	assert.Less(t, time.Since(start), 9*time.Second, "SIGTERM, not the SIGKILL fallback, ended it")
	require.NoError(t, srv.Stop(), "Stop twice")
	assert.False(t, isMariadbd(pid), "mariadbd %d", pid)
	assert.NoDirExists(t, dir)
	require.Error(t, db.PingContext(ctx))
}

func TestNotInstalled(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := mariadbserver.Start(t.Context(), mariadbserver.Options{})
	assert.ErrorIs(t, err, mariadbserver.ErrNotInstalled)
}

func TestQuoteName(t *testing.T) {
	assert.Equal(t, "`app`", mariadbserver.QuoteName("app"))
	assert.Equal(t, "`a``b c`", mariadbserver.QuoteName("a`b c"))
}
