package pgserver_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/internal/harness/pgserver"
	"quorumlock.dev/internal/harness/pgtest"
)

// isPostgres reports whether pid is a live (not zombie) process running postgres. A pid can be
// reused once its process is reaped, hence the name check.
func isPostgres(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' {
		return false
	}
	return bytes.Contains(stat[:i], []byte("(postgres"))
}

// backendPids returns the pids of the server's processes other than the postmaster.
func backendPids(t *testing.T, dsn string) []int {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	require.NoError(t, err)
	defer conn.Close(t.Context())
	rows, err := conn.Query(t.Context(), "SELECT pid FROM pg_stat_activity")
	require.NoError(t, err)
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	require.NoError(t, err)
	out := make([]int, len(pids))
	for i, p := range pids {
		out[i] = int(p)
	}
	return out
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	srv := pgtest.Start(t)
	ctx := t.Context()

	assert.Equal(t, "postgres://postgres@"+srv.Addr()+"/app?sslmode=disable", srv.DSN("app"))
	pid := srv.Pid()
	require.True(t, isPostgres(pid), "process %d", pid)
	require.FileExists(t, srv.Dir()+"/data/PG_VERSION")
	require.FileExists(t, srv.Dir()+"/postgres.log")

	require.NoError(t, srv.CreateDatabase(ctx, "App DB"))
	require.Error(t, srv.CreateDatabase(ctx, "App DB"), "the database exists")
	conn, err := pgx.Connect(ctx, srv.DSN("App DB"))
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var db string
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_database()").Scan(&db))
	assert.Equal(t, "App DB", db)

	// Paused, the server answers neither the open connection nor a new one.
	require.NoError(t, srv.Pause())
	for name, query := range map[string]func(context.Context) error{
		"open connection": func(ctx context.Context) error {
			return conn.QueryRow(ctx, "SELECT 1").Scan(new(int))
		},
		"new connection": func(ctx context.Context) error {
			c, err := pgx.Connect(ctx, srv.DSN("postgres"))
			if err == nil {
				c.Close(ctx)
			}
			return err
		},
	} {
		qctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		start := time.Now()
		err := query(qctx)
		cancel()
		assert.Error(t, err, name)
		assert.Less(t, time.Since(start), 2*time.Second, name)
	}
	require.NoError(t, srv.Resume())
	conn2, err := pgx.Connect(ctx, srv.DSN("postgres"))
	require.NoError(t, err, "a connection works again")
	var one int
	require.NoError(t, conn2.QueryRow(ctx, "SELECT 1").Scan(&one))
	backends := backendPids(t, srv.DSN("postgres"))
	require.NotEmpty(t, backends)

	// Stop ends open sessions (fast shutdown) and every process of the server, also when the
	// server is paused.
	require.NoError(t, srv.Pause())
	require.NoError(t, srv.Pause(), "Pause twice")
	start := time.Now()
	require.NoError(t, srv.Stop())
	assert.Less(t, time.Since(start), 4*time.Second, "SIGINT, not the SIGKILL fallback, ended it")
	require.NoError(t, srv.Stop(), "Stop twice")
	assert.False(t, isPostgres(pid), "postmaster %d", pid)
	for _, p := range backends {
		assert.Eventually(t, func() bool { return !isPostgres(p) }, 2*time.Second, 10*time.Millisecond, "backend %d", p)
	}
	assert.NoDirExists(t, srv.Dir())
	require.Error(t, srv.Pause(), "Pause on a stopped server")
	require.Error(t, conn2.Ping(ctx))
}

// TestReuseDir: a server started on the Dir of a stopped one serves its data, and Stop keeps a
// Dir the caller chose. Beside it, Options.Autovacuum: off by default, on when asked.
func TestReuseDir(t *testing.T) {
	t.Parallel()
	pgtest.Need(t)
	// Not t.TempDir: its parent is private to root, and the server may run as another user.
	dir, err := os.MkdirTemp("", "pgserver-test-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	ctx := t.Context()

	srv, err := pgserver.Start(ctx, pgserver.Options{Dir: dir})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Stop() })
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (7)")
	require.NoError(t, err)
	var autovacuum string
	require.NoError(t, conn.QueryRow(ctx, "SHOW autovacuum").Scan(&autovacuum))
	assert.Equal(t, "off", autovacuum, "by default")
	require.NoError(t, conn.Close(ctx))
	require.NoError(t, srv.Stop())
	require.DirExists(t, dir)

	again, err := pgserver.Start(ctx, pgserver.Options{Dir: dir, Autovacuum: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = again.Stop() })
	conn, err = pgx.Connect(ctx, again.DSN("postgres"))
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var v int
	require.NoError(t, conn.QueryRow(ctx, "SELECT v FROM kept").Scan(&v))
	assert.Equal(t, 7, v)
	require.NoError(t, conn.QueryRow(ctx, "SHOW autovacuum").Scan(&autovacuum))
	assert.Equal(t, "on", autovacuum, "with Autovacuum")
}

func TestNotInstalled(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := pgserver.Start(t.Context(), pgserver.Options{})
	assert.ErrorIs(t, err, pgserver.ErrNotInstalled)
}

// childrenOf returns the pids of the processes whose parent is pid.
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var kids []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(stat, ')')
		if f := strings.Fields(string(stat[i+1:])); len(f) > 1 && f[1] == strconv.Itoa(pid) {
			kids = append(kids, p)
		}
	}
	return kids
}

// helperEnv makes the test binary run TestHelperServer as a process of its own.
const helperEnv = "PGSERVER_TEST_HELPER"

// TestHelperServer is not a test: run by TestKilledBinary, it starts a server, opens a
// connection, pauses the server if asked to, prints the dir and the pids of the server's
// processes, and waits to be killed.
func TestHelperServer(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		return
	}
	srv, err := pgserver.Start(t.Context(), pgserver.Options{})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	conn, err := pgx.Connect(t.Context(), srv.DSN("postgres"))
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	defer conn.Close(context.Background())
	if mode == "paused" {
		if err := srv.Pause(); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
	}
	pids := append([]int{srv.Pid()}, childrenOf(srv.Pid())...)
	fmt.Println("server:", srv.Dir(), strings.Trim(fmt.Sprint(pids), "[]"))
	time.Sleep(time.Minute)
}

// TestKilledBinary: a test binary killed with SIGKILL, which runs no cleanup, leaves no server
// process behind, whether the server was running or paused.
func TestKilledBinary(t *testing.T) {
	t.Parallel()
	pgtest.Need(t)
	for _, mode := range []string{"running", "paused"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperServer$")
			cmd.Env = append(os.Environ(), helperEnv+"="+mode)
			out, err := cmd.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			})

			var dir string
			var pids []int
			lines := bufio.NewScanner(out)
			for lines.Scan() {
				line, ok := strings.CutPrefix(lines.Text(), "server: ")
				if !ok {
					require.False(t, strings.HasPrefix(lines.Text(), "error:"), lines.Text())
					continue
				}
				f := strings.Fields(line)
				dir = f[0]
				for _, p := range f[1:] {
					pid, err := strconv.Atoi(p)
					require.NoError(t, err)
					pids = append(pids, pid)
				}
				break
			}
			require.NotEmpty(t, dir, "the helper printed no server")
			t.Cleanup(func() { _ = os.RemoveAll(dir) })
			require.True(t, isPostgres(pids[0]), "the postmaster before the kill")
			// The backend of Start's last probe may still be exiting when the helper lists.
			pids = slices.DeleteFunc(pids, func(p int) bool { return !isPostgres(p) })
			require.GreaterOrEqual(t, len(pids), 3, "the postmaster, a backend and background processes")

			require.NoError(t, cmd.Process.Kill())
			_ = cmd.Wait()
			for _, p := range pids {
				assert.Eventually(t, func() bool { return !isPostgres(p) }, 5*time.Second, 10*time.Millisecond, "process %d", p)
			}
		})
	}
}
