package allocjobs

// The incident review's testing matrix on real servers: redis-server masters and a
// throw-away PostgreSQL, both started by the tests on loopback ports.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/fence"
	"quorumlock.dev/fence/pgfence"
	"quorumlock.dev/internal/harness/pgtest"
	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
	"quorumlock.dev/redlock"

	"quorumlock.dev/driver"

	"quorumlock.dev/driver/goredis"
)

func TestMain(m *testing.M) {
	if os.Getenv("QUORUMLOCK_HOLDER") != "" {
		os.Exit(holder())
	}
	redis.SetLogger(quiet{})
	code := m.Run()
	if err := pgtest.StopShared(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

const inventorySchema = `CREATE TABLE inventory (
	sku   text PRIMARY KEY,
	qty   int NOT NULL,
	owner text NOT NULL,
	fence bigint NOT NULL DEFAULT 0
)`

var inventory = pgfence.Guard{Table: "inventory"}

// stack is what a proof test runs on: three redis-server masters, a
// PostgreSQL database with one inventory row, and lock clients.
type stack struct {
	masters []string
	pool    *pgxpool.Pool
	dsn     string
}

func newStack(t *testing.T) *stack {
	t.Helper()
	servers := redistest.StartN(t, 3, redisserver.Options{})
	s := &stack{}
	for _, srv := range servers {
		s.masters = append(s.masters, srv.Addr())
	}
	s.dsn = pgtest.NewDatabase(t, pgtest.Shared(t))
	s.pool = pgtest.Pool(t, s.dsn)
	ctx := context.Background()
	_, err := s.pool.Exec(ctx, inventorySchema)
	require.NoError(t, err)
	_, err = s.pool.Exec(ctx, `INSERT INTO inventory (sku, qty, owner) VALUES ('WH-01', 100, 'nobody')`)
	require.NoError(t, err)
	_, err = s.pool.Exec(ctx, pgfence.Schema)
	require.NoError(t, err)
	return s
}

// client is a lock client over the stack's masters, fenced by the
// PostgreSQL counter when fenced is set.
func (s *stack) client(t *testing.T, fenced bool, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	var masters []driver.Conn
	for _, a := range s.masters {
		c := redis.NewClient(&redis.Options{Addr: a})
		t.Cleanup(func() { _ = c.Close() })
		masters = append(masters, goredis.Conn(c))
	}
	// 100 ms: a clean-clone CI run once saw every call of an attempt miss 20 ms.
	opts = append([]redlock.Option{redlock.WithNodeTimeout(100 * time.Millisecond)}, opts...)
	if fenced {
		counter, err := pgfence.NewCounter(s.pool)
		require.NoError(t, err)
		opts = append(opts, redlock.WithFence(counter))
	}
	c, err := redlock.New(masters, opts...)
	require.NoError(t, err)
	return c
}

func (s *stack) row(t *testing.T) (qty int, owner string, f int64) {
	t.Helper()
	require.NoError(t, s.pool.QueryRow(context.Background(), `SELECT qty, owner, fence FROM inventory WHERE sku = 'WH-01'`).Scan(&qty, &owner, &f))
	return qty, owner, f
}

// write is the guarded allocation: take n units as owner, with the fence.
func write(ctx context.Context, db pgfence.DB, token uint64, owner string, n int) error {
	_, err := inventory.Update(ctx, db, token, "qty = qty - $1, owner = $2", "sku = $3", n, owner, "WH-01")
	return err
}

// writeUnfenced is the same write by a team that skipped the fence.
func writeUnfenced(ctx context.Context, db pgfence.DB, owner string, n int) error {
	_, err := db.Exec(ctx, `UPDATE inventory SET qty = qty - $1, owner = $2 WHERE sku = 'WH-01'`, n, owner)
	return err
}

const proofTTL = 300 * time.Millisecond

// pausePastLease sleeps until the lock's lease is over on the masters too
// (the TTL, counted from before the lock was taken, plus a margin).
func pausePastLease(l *redlock.Lock) {
	time.Sleep(time.Until(l.Until()) + proofTTL/3)
}

// TestPausedHolderRejected: A takes the lock and pauses past its TTL; B
// takes it and writes; A wakes and writes with its stale fence: refused,
// the row keeps B's write, the rejection is counted.
func TestPausedHolderRejected(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	c := s.client(t, true, redlock.WithRetry(0, 5*time.Millisecond, 5*time.Millisecond))

	a, err := c.TryLock(ctx, "alloc:WH-01", proofTTL)
	require.NoError(t, err)
	fa, ok := a.Fence()
	require.True(t, ok)
	pausePastLease(a) // the GC pause of the incident review

	b, err := c.Lock(ctx, "alloc:WH-01", proofTTL)
	require.NoError(t, err)
	fb, _ := b.Fence()
	require.Greater(t, fb, fa)
	require.NoError(t, write(ctx, s.pool, fb, "B", 1))
	require.NoError(t, b.Unlock(ctx))

	before := fence.Rejected()
	err = write(ctx, s.pool, fa, "A", 1)
	assert.ErrorIs(t, err, fence.ErrFenceRejected, "A's stale write must be refused")
	assert.Equal(t, before+1, fence.Rejected(), "lock_fence_rejected_total counts it")
	qty, owner, f := s.row(t)
	assert.Equal(t, 99, qty, "only B's unit is taken")
	assert.Equal(t, "B", owner)
	assert.Equal(t, int64(fb), f)
	assert.ErrorIs(t, a.Unlock(ctx), redlock.ErrLockNotHeld, "A learns that its lease was lost")
}

// TestPausedHolderUnfencedDuplicates is the twin without the fence: the
// stale holder's write lands on top of B's. The failure is observed.
func TestPausedHolderUnfencedDuplicates(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	c := s.client(t, false, redlock.WithRetry(0, 5*time.Millisecond, 5*time.Millisecond))

	a, err := c.TryLock(ctx, "alloc:WH-01", proofTTL)
	require.NoError(t, err)
	pausePastLease(a)

	b, err := c.Lock(ctx, "alloc:WH-01", proofTTL)
	require.NoError(t, err, "B gets the lock while A sleeps")
	require.NoError(t, writeUnfenced(ctx, s.pool, "B", 1))
	require.NoError(t, b.Unlock(ctx))

	require.NoError(t, writeUnfenced(ctx, s.pool, "A", 1), "nothing stops A")
	qty, owner, _ := s.row(t)
	assert.Equal(t, 98, qty, "both allocations were applied: the duplicate")
	assert.Equal(t, "A", owner, "the stale holder overwrote the new holder's write")
}

// TestStoppedProcessRejected: the holder is a real process, stopped with
// SIGSTOP while it holds the lock and resumed with SIGCONT after another
// process-level holder took over. Its write is refused; the data is B's.
func TestStoppedProcessRejected(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		"QUORUMLOCK_HOLDER=1",
		"QUORUMLOCK_MASTERS="+strings.Join(s.masters, ","),
		"QUORUMLOCK_DSN="+s.dsn,
		"QUORUMLOCK_TTL="+proofTTL.String(),
	)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	var once sync.Once
	reap := func() { once.Do(func() { _ = cmd.Wait() }) }
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		reap()
	})
	lines := bufio.NewScanner(stdout)

	require.True(t, lines.Scan(), "the holder said nothing")
	var fa uint64
	_, err = fmt.Sscanf(lines.Text(), "locked %d", &fa)
	require.NoError(t, err, lines.Text())

	require.NoError(t, cmd.Process.Signal(syscall.SIGSTOP))
	c := s.client(t, true, redlock.WithRetry(0, 5*time.Millisecond, 5*time.Millisecond))
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b, err := c.Lock(lctx, "alloc:WH-01", proofTTL) // waits out the stopped holder's lease
	require.NoError(t, err)
	fb, _ := b.Fence()
	require.Greater(t, fb, fa)
	require.NoError(t, write(ctx, s.pool, fb, "B", 1))
	require.NoError(t, b.Unlock(ctx))

	require.NoError(t, cmd.Process.Signal(syscall.SIGCONT))
	_, err = fmt.Fprintln(stdin, "write")
	require.NoError(t, err)
	require.True(t, lines.Scan(), "the holder said nothing after SIGCONT")
	assert.Equal(t, "rejected", lines.Text())
	reap()
	assert.Zero(t, cmd.ProcessState.ExitCode())

	qty, owner, f := s.row(t)
	assert.Equal(t, 99, qty)
	assert.Equal(t, "B", owner)
	assert.Equal(t, int64(fb), f)
}

// holder is the child process of TestStoppedProcessRejected: take the
// lock, report the fence, wait for the word, write with that fence.
func holder() int {
	ctx := context.Background()
	ttl, _ := time.ParseDuration(os.Getenv("QUORUMLOCK_TTL"))
	pool, err := pgxpool.New(ctx, os.Getenv("QUORUMLOCK_DSN"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pool.Close()
	var masters []driver.Conn
	for _, a := range strings.Split(os.Getenv("QUORUMLOCK_MASTERS"), ",") {
		masters = append(masters, goredis.Conn(redis.NewClient(&redis.Options{Addr: a})))
	}
	counter, err := pgfence.NewCounter(pool)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c, err := redlock.New(masters, redlock.WithNodeTimeout(100*time.Millisecond), redlock.WithFence(counter))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	l, err := c.TryLock(ctx, "alloc:WH-01", ttl)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	f, _ := l.Fence()
	fmt.Println("locked", f)
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() {
		return 1
	}
	switch err := write(ctx, pool, f, "A", 1); {
	case errors.Is(err, fence.ErrFenceRejected):
		fmt.Println("rejected")
	case err != nil:
		fmt.Println("error:", err)
		return 1
	default:
		fmt.Println("written")
	}
	return 0
}

// TestFenceUnavailable: the counter's node is down. No lock is handed out,
// the caller gets ErrFenceUnavailable and writes nothing; once the node is
// back, a retry succeeds.
func TestFenceUnavailable(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	counterSrv := redistest.Start(t, redisserver.Options{})
	node := redis.NewClient(&redis.Options{Addr: counterSrv.Addr(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = node.Close() })
	counter, err := fence.NewRedisCounter(goredis.Conn(node))
	require.NoError(t, err)
	var masters []driver.Conn
	for _, a := range s.masters {
		masters = append(masters, goredis.Conn(redistest.Client(t, a)))
	}
	c, err := redlock.New(masters, redlock.WithFence(counter), redlock.WithRetry(3, 10*time.Millisecond, 10*time.Millisecond))
	require.NoError(t, err)

	require.NoError(t, counterSrv.Kill())
	l, err := c.Lock(ctx, "alloc:WH-01", time.Second)
	require.ErrorIs(t, err, redlock.ErrFenceUnavailable)
	assert.Nil(t, l, "no lock without the fence that was asked for")
	for _, a := range s.masters {
		v, err := redistest.Client(t, a).Exists(ctx, "lock:alloc:WH-01").Result()
		require.NoError(t, err)
		assert.Zero(t, v, "the quorum was released on %s", a)
	}
	qty, owner, _ := s.row(t)
	assert.Equal(t, 100, qty, "no row written")
	assert.Equal(t, "nobody", owner)

	require.NoError(t, counterSrv.Restart(ctx))
	require.Eventually(t, func() bool {
		l, err = c.Lock(ctx, "alloc:WH-01", time.Second)
		return err == nil
	}, 10*time.Second, 100*time.Millisecond, "a retry after the counter is back must succeed")
	token, _ := l.Fence()
	require.NoError(t, write(ctx, s.pool, token, "C", 1))
	require.NoError(t, l.Unlock(ctx))
}

// TestLoad500PerSecond: 500 acquisitions per second for a bounded time
// (FENCE_SOAK, default 2s; make soak runs longer) over a family of
// resources: every minted fence is recorded exactly once, fences of a
// resource start at the counter node's clock (in microseconds), strictly
// increase in the order the lock was held and leave no gap, and no shipment
// is duplicated.
func TestLoad500PerSecond(t *testing.T) {
	if testing.Short() {
		t.Skip("a load run: skipped with -short")
	}
	s := newStack(t)
	ctx := context.Background()
	duration := 2 * time.Second
	if v := os.Getenv("FENCE_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err)
		duration = d
	}
	_, err := s.pool.Exec(ctx, `CREATE TABLE audit (seq bigserial PRIMARY KEY, resource text NOT NULL, fence bigint NOT NULL, job bigint NOT NULL UNIQUE)`)
	require.NoError(t, err)

	counterSrv := redistest.Start(t, redisserver.Options{Args: []string{"--appendonly", "yes", "--appendfsync", "always"}})
	counterNode := redistest.Client(t, counterSrv.Addr())
	counter, err := fence.NewRedisCounter(goredis.Conn(counterNode))
	require.NoError(t, err)
	clock, err := counterNode.Time(ctx).Result()
	require.NoError(t, err)
	var masters []driver.Conn
	for _, a := range s.masters {
		masters = append(masters, goredis.Conn(redistest.Client(t, a)))
	}
	// A generous node timeout: this test is about the fences under load, and
	// a busy CI machine must not turn a slow answer into a failed release.
	c, err := redlock.New(masters, redlock.WithFence(counter), redlock.WithRetry(0, time.Millisecond, 2*time.Millisecond),
		redlock.WithNodeTimeout(500*time.Millisecond))
	require.NoError(t, err)

	const rate, resources, workers = 500, 8, 16
	jobs := make(chan int64, rate)
	go func() {
		defer close(jobs)
		tick := time.NewTicker(time.Second / rate)
		defer tick.Stop()
		end := time.Now().Add(duration)
		for job := int64(1); time.Now().Before(end); job++ {
			<-tick.C
			jobs <- job
		}
	}()
	var wg sync.WaitGroup
	var failures sync.Map
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for job := range jobs {
				res := "ship:WH-" + strconv.FormatInt(job%resources, 10)
				lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				l, err := c.Lock(lctx, res, 2*time.Second)
				cancel()
				if err != nil {
					failures.Store(job, err)
					continue
				}
				f, _ := l.Fence()
				if _, err := s.pool.Exec(ctx, `INSERT INTO audit (resource, fence, job) VALUES ($1, $2, $3)`, res, int64(f), job); err != nil {
					failures.Store(job, err)
				}
				if err := l.Unlock(ctx); err != nil {
					failures.Store(job, err)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	failures.Range(func(k, v any) bool {
		t.Errorf("job %v: %v", k, v)
		return true
	})

	var total, distinctJobs int64
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT job) FROM audit`).Scan(&total, &distinctJobs))
	assert.Equal(t, total, distinctJobs, "a shipment was recorded twice")
	t.Logf("%d acquisitions in %v: %.0f/s", total, elapsed, float64(total)/elapsed.Seconds())
	// Not a speed target: a check that the test made the load it is about.
	assert.GreaterOrEqual(t, float64(total), 0.5*rate*duration.Seconds(), "the test did not produce its load")

	rows, err := s.pool.Query(ctx, `SELECT resource, fence FROM audit ORDER BY seq`)
	require.NoError(t, err)
	last := map[string]int64{}
	for rows.Next() {
		var res string
		var f int64
		require.NoError(t, rows.Scan(&res, &f))
		if prev, ok := last[res]; ok {
			assert.Equal(t, prev+1, f, "%s: fence %d after %d: not strictly increasing, or a gap", res, f, prev)
		} else {
			assert.GreaterOrEqual(t, f, clock.UnixMicro(), "%s: the first fence is below the counter node's clock", res)
		}
		last[res] = f
	}
	require.NoError(t, rows.Err())
	assert.Len(t, last, resources)
}
