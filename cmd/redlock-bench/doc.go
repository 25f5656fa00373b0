// Command redlock-bench measures the redlock client over N masters against
// its single-instance mode (the same client over one master), side by side
// in one run, and reports latency percentiles, throughput, outcomes,
// allocations and CPU per row. It does not tune anything to look good: every
// figure is what the run measured.
//
// # Usage
//
//	redlock-bench [flags]           the benchmark below
//	redlock-bench fencing [flags]   the fence's duplicate-write benchmark
//	redlock-bench chaos [flags]     failures injected on real servers, counted
//	redlock-bench check -addrs ...  the masters' and fence counter's settings (docs/operations.md)
//	redlock-bench choose [flags]    the lock-choice table: single Redis, Redlock, etcd, PostgreSQL
//
// `redlock-bench -h` and `redlock-bench fencing -h` list every flag with its
// default. The fencing subcommand says on stderr as each pass starts and
// ends, with a progress bar in between when stderr is a terminal and a line
// every 10 s otherwise. Exit status 0 means success, 1 a failed run (a
// server could not be reached, a write failed), 2 bad flags.
//
// # Servers
//
// The embedded backend (the default) runs in-process miniredis servers, so
// the command works on a machine without Redis; its figures include the
// servers' own CPU and allocations, and are for trying the tool, not for
// conclusions: when its rows count errors (or, with every master alive, a
// quorum found unavailable), the text output says under the table that the
// in-process servers were starved of CPU. -backend redis-server starts real
// redis-server processes on free loopback ports (no persistence) and stops
// them by pid at the end, on an error and on Ctrl-C. -addrs uses existing servers: nothing is flushed,
// every key lives under a random prefix (lock:redlock-bench-XXXXXXXX:...) and
// the run deletes its keys afterwards. The report names the backend and
// every server with its version.
//
// Each of -addrs, -single-addr and -fence-addr is host:port or a URL as
// go-redis's ParseURL reads it: redis://[user[:password]@]host:port[/db], or
// rediss:// for TLS (verified against the system's CAs, or -tls-ca FILE).
// -password-env NAME takes the password of every server whose URL has none
// from the environment variable NAME (REDISCLI_AUTH, say), so that it is not
// in the command line for every user of the machine to read; a password in a
// URL works but is visible there. No report, log line or error prints a
// password: addresses appear with it replaced by xxxxx. -pg-dsn (fencing,
// chaos) is a postgres:// URL or key=value string; its password is best left
// to PGPASSWORD or ~/.pgpass, which pgx reads, and is never printed either.
// -mysql-dsn (fencing, chaos) is a github.com/go-sql-driver/mysql DSN,
// user@tcp(host:port)/db; a DSN without a password takes MYSQL_PWD's, and
// that one is never printed either.
// docs/operations.md has the details.
//
// # Drivers
//
// -driver go-redis,go-redis-pipelined,rueidis,valkey-go names the Redis
// clients the masters (and the single server and the fence counter) are
// reached through; every row of every scenario is made once per driver, the
// drivers' rows of a variant side by side and all of them alternating in
// the same slices. The default is go-redis alone, and then the table names
// no driver; otherwise each row's label starts with its driver.
//
//   - go-redis: a *redis.Client per server, library defaults but PoolSize
//     (twice the highest -c, plus 10).
//   - go-redis-pipelined: that client's AutoPipeline(), which batches the
//     calls of every goroutine on one connection per server (experimental in
//     go-redis v9.23).
//   - rueidis, valkey-go: one client per server with ForceSingleClient and
//     DisableCache, one pipelined connection per server (PipelineMultiplex
//     -1) and a MaxFlushDelay of 100 µs; docs/drivers.md has the
//     measurements that chose them.
//
// Each works against the embedded backend as well (miniredis speaks RESP3,
// which rueidis and valkey-go need). -raw adds to the healthy scenario, per
// driver, the raw quorum loop: SET NX PX on every master at once, done at a
// majority, and a compare-and-delete on every master, waiting for all, each
// round bounded by -node-timeout; the least a Redlock client must do, with
// nothing of the lock's own. Its rows have mode and variant "raw".
//
// # Scenarios
//
//   - healthy: redlock over -masters masters and single-instance, at each -c
//     (and raw, with -raw). redlock and raw rows carry ratio_of "single",
//     the single row of their driver.
//   - slow: one master behind an in-process TCP proxy, once with no added
//     latency and once with -delay; both rows go through a proxy, so the
//     proxy's own cost is not mistaken for the slow master's. The delayed
//     row carries ratio_of "delay_ms=0".
//   - dead: -dead masters replaced by addresses nothing listens on, against
//     the same masters all alive; ratio_of "healthy".
//   - scale: redlock over 1, 3, 5, 7 and 9 masters; ratio_of "masters=3".
//   - contended: redlock over -masters masters and single-instance, with
//     waiting: -keys defaults to 1 here, and each goroutine calls Lock, which
//     waits with the client's defaults, holds for -hold and calls Unlock.
//     Each Lock call has its own deadline of twice the TTL, so a stuck run
//     ends. Variants: single, redlock (waiters woken by the release),
//     "redlock fair" (WithFairness: waiters queued in arrival order) and
//     "redlock poll" (masters without Subscribe: waiters sleep the retry
//     delay, as Lock did before releases were pushed). Every one of those
//     shares one client among the goroutines; with -clients N, two more,
//     "redlock N clients" and "redlock fair N clients", give goroutine i
//     client i mod N, each with connections of its own, as separate
//     processes would have: nothing is passed in-process there. A third,
//     "redsync N clients" (mode redsync, driver go-redis), is the baseline
//     of github.com/go-redsync/redsync/v4: goroutine i locks through
//     redsync over the go-redis clients of group i mod N, a NewMutex and
//     LockContext per section with redsync's defaults (retry delay 50-250
//     ms at random, a try timeout of 5% of the TTL) but enough tries that
//     the wait bound, not the count of tries, ends a wait. With -procs N
//     (at most 64), "redlock N procs" and "redlock fair N procs" run the
//     goroutines in N worker processes, this program started again
//     (goroutine i in process i mod N; fewer processes when -c is lower),
//     each goroutine with a client of its own. Each worker reports every
//     slice's counts, histograms and sections (wall-clock times) to the
//     run on its stdout, which merges them into the row; -n splits each
//     slice's attempts among the workers by their goroutines.
//
// The rows of a scenario are measured in -rounds slices that alternate
// (A, B, A, B ...) so that drift in the machine's speed hits every row alike.
// In every scenario but contended, each goroutine calls TryLock on a random
// one of -keys resources, holds the lock for -hold, and calls Unlock.
// Contention is not retried: it counts as contended.
//
// In the contended scenario a Lock called before the end of a slice is
// waited for, so no wait is left out; sections_per_sec and fairness count
// the sections that began before the end. An in-process check counts
// violations: each resource has a holder counter, raised when Lock returns
// and lowered before Unlock, and a section that finds it above zero is one.
// There the acquire_* columns are Lock's latency, over every call. In the
// -procs rows no counter sees every holder: the sections of all workers,
// each from Lock returning to Unlock being called, are ordered by the wall
// clock, and a section that began before an earlier one ended is a
// violation; their allocs_per_op and cpu_seconds add the workers' to the
// run's own.
//
// # Fencing
//
// redlock-bench fencing runs the duplicate-write benchmark of docs/fencing.md
// ("The proof"): the same allocation jobs without the fence and with it, on
// one store, chosen by -store: memory, postgres (-pg-dsn; guarded by pgfence),
// mysql (-mysql-dsn, MySQL or MariaDB; guarded by sqlfence) or sqlite
// (-sqlite-file, default a file in a temporary dir; guarded by sqlfence).
// Without -store, -pg-dsn or -backend redis-server means postgres, -mysql-dsn
// mysql, -sqlite-file sqlite, and anything else memory. With -backend
// redis-server and no DSN, postgres and mysql run on a throw-away PostgreSQL
// or MariaDB that the run starts and stops. Its tables carry a random prefix
// and are dropped afterwards. Then, on a fresh store, it times
// -cost-samples jobs' calls (default 2000; 0 skips it) one at a time, without
// and with the fence. Its JSON object:
//
//	backend, servers, started, gomaxprocs, config   as in the benchmark's report
//	storage             memory, postgresql, mysql or sqlite
//	pg_version          PostgreSQL's server_version (postgresql only)
//	storage_version     the server's VERSION() or sqlite_version(); absent in memory
//	counter_durability  "ok", or why the fence counter could lose fences
//	results             one object per pass, unfenced then fenced: mode, jobs,
//	                      pauses, redelivered, shipments, orders, duplicates,
//	                      rejections, errors, first_error, wall_s
//	guard_cost          absent with -cost-samples 0: samples, and for claim
//	                      (the read whether an order shipped, guarded: after
//	                      the claim of its row) and write (the stock and the
//	                      shipment, one transaction): unguarded and guarded,
//	                      each p50_us, p99_us and per_s (calls per second of
//	                      one caller)
//
// # Chaos
//
// redlock-bench chaos runs the chaos suite (-scenario, -runs, -quick, -store
// memory|postgres|mysql|sqlite, -pg-dsn, -mysql-dsn, -sqlite-file, -o
// text|json|csv, -json FILE): each failure injected on real redis-server
// processes while worker processes, this binary started again, take locks
// and write through a fenced store. One
// row per scenario; exit status 1 when a row did not hold. The scenarios,
// the columns and the invariants are in docs/chaos.md. The output below is
// the benchmark's, not the chaos suite's.
//
// # Choose
//
// redlock-bench choose runs the four options of the lock-choice table on this
// machine (-options single-redis,redlock,etcd,postgres; -backend
// embedded|redis-server for the Redis ones; -c 1,8,64; -d 1s per row; -keys;
// -ttl; -node-timeout; -lease; -o text|json|csv; -plot FILE): single-redis is
// the client over one master, unfenced; redlock is five masters with a fence
// from fence.RedisCounter on a sixth server; etcd is concurrency.Mutex on a
// three-member cluster of Debian's etcd binary (child processes), one session
// per goroutine, the lock key's create revision as fence; postgres is
// SELECT ... FOR UPDATE NOWAIT on a throw-away PostgreSQL, with a version
// column. Each option gets a row per concurrency (option, concurrency,
// attempts, cycles, contended, errors, acquire_p50_us, acquire_p90_us,
// acquire_p99_us, acquire_p999_us, cycles_per_sec, fence,
// stale_write_accepted, stale_write, after_failover) and two experiments: a
// holder paused past its lease writes after the next holder, through the
// option's guard (fence.RedisGuard, the version column) or none, and
// stale_write_accepted says whether its value is what the store kept;
// after_failover kills a master (redlock), the etcd leader, or a Sentinel
// primary whose replication was held back (single-redis, always real
// redis-server processes). An option whose server is not installed is
// skipped with a line on stderr, or fails the run with -require. The
// columns, a real run and what they mean: docs/choosing.md.
//
// # Output
//
// -o text prints a table; -o json prints one object with the run's backend,
// servers_in_process, servers, config and a results array of rows; -o csv
// prints one header line and one line per row. The row fields (JSON keys and CSV columns, in order):
//
//	mode             redlock, raw (-raw), single or redsync (-clients)
//	variant          names the row in its scenario: single, redlock,
//	                   delay_ms=0, delay_ms=30, healthy, dead=2, masters=5,
//	                   redlock fair, redlock poll
//	masters          masters of the row's client (1 for single)
//	scenario         healthy, slow, dead, scale or contended
//	concurrency      goroutines sharing the client
//	keys             resources the locks are spread over
//	delay_ms         latency added to the slow master
//	dead             unreachable masters
//	fence            whether a fencing token was minted per lock
//	hold_ms          time the lock was held
//	attempts         TryLock calls (contended: Lock calls)
//	cycles           locks acquired and released
//	seconds          time spent measuring the row
//	ops_per_sec      cycles per second
//	acquire_p50_us   TryLock latency percentiles in µs, over every call
//	acquire_p90_us     whatever its outcome (for dead rows that is the
//	acquire_p99_us     time to the typed error); from an HDR histogram,
//	acquire_p999_us    3 significant figures
//	acquire_max_us
//	cycle_p50_us     TryLock + hold + Unlock, acquired cycles only
//	acquired         TryLock succeeded and Unlock confirmed the lease
//	contended        ErrNotAcquired (contended scenario: Lock gave up)
//	unavailable      ErrQuorumUnavailable or ErrFenceUnavailable
//	errors           anything else, failed Unlocks included
//	first_error      the first of errors as the library said it (empty when none)
//	allocs_per_op    heap allocations of the whole process per attempt
//	cpu_seconds      user + system CPU of the whole process
//	ratio_of         the row this row's p50 is compared with ("" for none)
//	ratio_p50        acquire_p50_us over that row's
//	sections_per_sec contended: sections begun per second of the slices
//	handoff_p50_us   contended: from the holder calling Unlock to the
//	handoff_p99_us     next holder's Lock returning, when that holder is
//	                   another goroutine: the lock's idle gap between
//	                   sections (a release hands the lock on before its
//	                   Unlock returns)
//	wait_p99_us      contended: Lock called -> won, won calls only
//	fairness         contended: fewest sections of a goroutine over the
//	                   most (1 equal turns, 0 a goroutine had none)
//	violations       contended: sections that began while another
//	                   goroutine held the resource; must be 0
//	driver           the Redis client of the row: go-redis,
//	                   go-redis-pipelined, rueidis or valkey-go
//	rounds           contended: acquisition attempts of the row's clients,
//	                   as their Attempt hook hears of them (Lock's
//	                   retries, and handoffs to a waiter, included)
//	lost_rounds      contended: of those, lost to another holder
//	                   (ErrNotAcquired)
//	split_rounds     contended: of those, lost with some masters won but
//	                   no majority: the votes split (ErrVotesSplit)
//	split_pct        contended: split_rounds over lost_rounds, in percent
//	                   (the text table's "split %"; "-" when none was lost)
//
// allocs_per_op and cpu_seconds count the whole process: with the embedded
// backend they include the in-process servers, most of the count, so the
// JSON says servers_in_process true and the text table says so in a header
// line and in the two columns' names. The client cannot be measured apart
// there: the runtime counts allocations per process, not per goroutine.
package main
