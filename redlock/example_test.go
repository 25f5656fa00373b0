package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strconv"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"quorumlock.dev/fence"
	"quorumlock.dev/redlock"
	"quorumlock.dev/redlock/redlockprom"

	"quorumlock.dev/driver/goredis"

	"quorumlock.dev/driver"
)

// servers starts n in-process Redis servers for the examples and returns
// their addresses; in production these are independent Redis servers.
func servers(n int) ([]string, func()) {
	var addrs []string
	var stops []func()
	for range n {
		srv, err := miniredis.Run()
		if err != nil {
			log.Fatal(err)
		}
		addrs = append(addrs, srv.Addr())
		stops = append(stops, srv.Close)
	}
	return addrs, func() {
		for _, stop := range stops {
			stop()
		}
	}
}

// masters starts n in-process Redis servers for the examples; in production
// these are the clients of independent Redis masters.
func masters(n int) ([]driver.Conn, func()) {
	addrs, stopServers := servers(n)
	var rdbs []*redis.Client
	for _, addr := range addrs {
		rdbs = append(rdbs, redis.NewClient(&redis.Options{Addr: addr}))
	}
	return goredis.Masters(rdbs...), func() {
		for _, rdb := range rdbs {
			_ = rdb.Close()
		}
		stopServers()
	}
}

func ExampleClient_Lock() {
	ms, stop := masters(5)
	defer stop()
	client, err := redlock.New(ms)
	if err != nil {
		log.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lock, err := client.Lock(ctx, "report:nightly", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Unlock(ctx)

	select {
	case <-lock.Done():
		fmt.Println("lease lost: stop the work")
	default:
		fmt.Println("holding", lock.Resource(), "on a majority of", len(ms), "masters")
	}
	// Output: holding report:nightly on a majority of 5 masters
}

// settled waits until every master holds token for resource: TryLock
// returns once a majority agreed, and the last SET may land a little later.
// Only the examples' fixed output needs it.
func settled(ctx context.Context, client *redlock.Client, resource, token string) {
	for range 1000 {
		in, err := client.Inspect(ctx, resource)
		all := err == nil
		for _, k := range in.Masters {
			all = all && k.Token == token
		}
		if all {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// ExampleClient_Inspect: who holds a lock on each master, and the
// break-glass release of a holder that is gone.
func ExampleClient_Inspect() {
	ms, stop := masters(3)
	defer stop()
	client, err := redlock.New(ms)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	gone, err := client.TryLock(ctx, "invoice:2026-12", time.Minute) // a holder that then died
	if err != nil {
		log.Fatal(err)
	}
	settled(ctx, client, "invoice:2026-12", gone.Token())

	in, err := client.Inspect(ctx, "invoice:2026-12")
	if err != nil {
		log.Fatal(err) // ErrQuorumUnavailable: a majority did not answer
	}
	for _, k := range in.Masters {
		fmt.Println(k.Token == in.Holder, k.TTL.Round(time.Minute), k.Queued, k.Err)
	}
	released, err := client.Release(ctx, "invoice:2026-12", in.Holder) // only for a holder known to be gone
	fmt.Println("released on", released, "masters", err)
	// Output:
	// true 1m0s 0 <nil>
	// true 1m0s 0 <nil>
	// true 1m0s 0 <nil>
	// released on 3 masters <nil>
}

func ExampleClient_TryLock() {
	ms, stop := masters(3)
	defer stop()
	client, err := redlock.New(ms)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	first, err := client.TryLock(ctx, "cache:refresh:home", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	_, err = client.TryLock(ctx, "cache:refresh:home", 10*time.Second)
	fmt.Println("second refresher:", errors.Is(err, redlock.ErrNotAcquired))

	if err := first.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	err = first.Unlock(ctx)
	fmt.Println("unlock twice:", errors.Is(err, redlock.ErrLockNotHeld))
	// Output:
	// second refresher: true
	// unlock twice: true
}

func ExampleWithFence() {
	ms, stop := masters(3)
	defer stop()
	// The counter lives on its own node, not on one of the masters.
	counterNode, stopCounter := masters(1)
	defer stopCounter()
	counter, err := fence.NewRedisCounter(counterNode[0])
	if err != nil {
		log.Fatal(err)
	}
	client, err := redlock.New(ms, redlock.WithFence(counter))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	var first, last uint64
	for i := range 3 {
		lock, err := client.TryLock(ctx, "alloc:WH-01", 30*time.Second)
		if err != nil {
			log.Fatal(err)
		}
		token, _ := lock.Fence()
		// Pass token to the storage with the write; it rejects any write
		// whose token is older than the newest it has seen.
		if i == 0 {
			first = token
		} else {
			fmt.Println("newer than the last:", token > last)
		}
		last = token
		_ = lock.Unlock(ctx)
	}
	// A new counter starts from the node's clock in microseconds, so that a
	// counter that lost its data never hands out a fence again; then +1.
	fmt.Println("steps of one:", last-first == 2)
	// Output:
	// newer than the last: true
	// newer than the last: true
	// steps of one: true
}

func ExampleClient_Do() {
	ms, stop := masters(3)
	defer stop()
	client, err := redlock.New(ms)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	err = client.Do(ctx, "invoice:counter", 10*time.Second, func(ctx context.Context, lock *redlock.Lock) error {
		// ctx ends when the lock is lost: hand it to the work the lock guards.
		fmt.Println("numbering invoices under", lock.Resource())
		return ctx.Err()
	})
	fmt.Println("lost:", errors.Is(err, redlock.ErrLockLost), "err:", err)
	// Output:
	// numbering invoices under invoice:counter
	// lost: false err: <nil>
}

func ExampleLock_Renew() {
	ms, stop := masters(3)
	defer stop()
	// A hook stands in for a metrics adapter or a tracer; the hooks left nil
	// are off. Hold's function hears each lock's end, and why.
	hooks := redlock.Hooks{Hold: func(_ context.Context, resource string) func(redlock.Event) {
		return func(e redlock.Event) {
			fmt.Println("held", resource, "until", e.Outcome, "renewed:", e.Renewed)
		}
	}}
	client, err := redlock.New(ms, redlock.WithHooks(hooks))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	ttl := 300 * time.Millisecond
	err = client.Do(ctx, "outbox:relay", ttl, func(ctx context.Context, lock *redlock.Lock) error {
		// Extended while batches go out, never for longer than an hour.
		if err := lock.Renew(ttl, time.Hour); err != nil {
			return err
		}
		for range 5 {
			time.Sleep(50 * time.Millisecond) // send a batch
			lock.Progress()
		}
		// Then the relay hangs: with no progress, it loses the lock at the
		// next check instead of keeping it for ever.
		<-ctx.Done()
		return context.Cause(ctx)
	})
	fmt.Println("lost:", errors.Is(err, redlock.ErrLockLost), "stalled:", errors.Is(err, redlock.ErrNoProgress))
	// Output:
	// held outbox:relay until no_progress renewed: true
	// lost: true stalled: true
}

// The README's quick start, on in-process servers: run and the functions it
// calls are the README's code, word for word (cmd/redlock-bench/internal/doccheck checks it).
func Example_quickStart() {
	masterAddrs, stopMasters := servers(3)
	defer stopMasters()
	nodes, stopNodes := servers(2)
	defer stopNodes()
	fenceAddr, stockAddr := nodes[0], nodes[1]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	if err := run(ctx, masterAddrs, fenceAddr, stockAddr); err != nil {
		log.Fatal(err)
	}
	stock := redis.NewClient(&redis.Options{Addr: stockAddr})
	defer stock.Close()
	var guard fence.RedisGuard
	qty, _, err := guard.Get(ctx, goredis.Conn(stock), "stock:WH-01")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("stock:WH-01 =", qty)
	// Output:
	// report written
	// moved stock from WH-01 to WH-07
	// sent batch-1
	// sent batch-2
	// stock:WH-01 = 99
}

// run locks on independent Redis masters (not replicas of one another; one
// master is the single-instance mode). The fence counter's node and the
// stock's are none of the masters.
func run(ctx context.Context, masterAddrs []string, fenceAddr, stockAddr string) error {
	var rdbs []*redis.Client
	for _, addr := range masterAddrs {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		rdbs = append(rdbs, rdb)
	}
	masters := goredis.Masters(rdbs...) // go-redis clients as the lock's masters
	client, err := redlock.New(masters)
	if err != nil {
		return err
	}
	defer client.Close() // ends its subscriptions; it releases no lock

	// A fenced client: each lock carries a token from a counter on its own node.
	fenceNode := redis.NewClient(&redis.Options{Addr: fenceAddr})
	defer fenceNode.Close()
	counter, err := fence.NewRedisCounter(goredis.Conn(fenceNode))
	if err != nil {
		return err
	}
	fenced, err := redlock.New(masters, redlock.WithFence(counter))
	if err != nil {
		return err
	}
	defer fenced.Close()
	stockRedis := redis.NewClient(&redis.Options{Addr: stockAddr})
	defer stockRedis.Close()
	stock := goredis.Conn(stockRedis)

	if err := nightlyReport(ctx, client); err != nil {
		return err
	}
	if err := moveStock(ctx, client, "WH-01", "WH-07"); err != nil {
		return err
	}
	if err := relay(ctx, client, []string{"batch-1", "batch-2"}); err != nil {
		return err
	}
	return recordStocktake(ctx, fenced, stock, "WH-01", 99)
}

// nightlyReport writes the report in one process at a time.
func nightlyReport(ctx context.Context, client *redlock.Client) error {
	// Lock waits for the holder's release or its keys' expiry: bound the wait.
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	lock, err := client.Lock(waitCtx, "report:nightly", 30*time.Second)
	if err != nil {
		return err // errors.Is(err, context.DeadlineExceeded): still held after 10 s
	}
	defer lock.Unlock(ctx)
	return writeReport(lock.Context()) // lock.Context() ends if the lock is lost
}

// moveStock holds both SKUs, or neither, while it moves stock between them.
func moveStock(ctx context.Context, client *redlock.Client, from, to string) error {
	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	lock, err := client.LockAll(waitCtx, []string{"sku:" + from, "sku:" + to}, 10*time.Second)
	if err != nil {
		return err
	}
	defer lock.Unlock(ctx)
	return transfer(lock.Context(), from, to)
}

// relay sends the outbox's batches under a lock that is extended while they
// go out. Do waits for the lock as Lock does: ctx bounds the wait.
func relay(ctx context.Context, client *redlock.Client, batches []string) error {
	err := client.Do(ctx, "outbox:relay", 30*time.Second, func(ctx context.Context, l *redlock.Lock) error {
		// Extended when a third of the lease is left, if Progress was called
		// since the last extension, never past an hour.
		if err := l.Renew(30*time.Second, time.Hour); err != nil {
			return err
		}
		for _, b := range batches {
			if err := send(ctx, b); err != nil { // ctx ends if the lock is lost
				return err
			}
			l.Progress()
		}
		return nil
	})
	return err // errors.Is(err, redlock.ErrLockLost): the lock was lost while fn ran
}

// recordStocktake stores a counted quantity. The guard refuses the write once
// a newer holder of the lock has written, so a holder that paused past its
// lease cannot overwrite its successor.
func recordStocktake(ctx context.Context, fenced *redlock.Client, stock driver.Conn, sku string, qty int) error {
	lock, err := fenced.TryLock(ctx, "stocktake:"+sku, 30*time.Second) // one attempt, no wait
	if err != nil {
		return err // errors.Is(err, redlock.ErrNotAcquired): another holder has it
	}
	defer lock.Unlock(ctx)
	token, _ := lock.Fence() // there whenever the client was built WithFence
	var guard fence.RedisGuard
	// A refused write wraps fence.ErrFenceRejected: a newer holder has written; this lock was stale.
	return guard.Set(ctx, stock, "stock:"+sku, strconv.Itoa(qty), token, 0)
}

// writeReport, transfer and send stand for the work that the quick start's
// locks guard.
func writeReport(ctx context.Context) error {
	fmt.Println("report written")
	return ctx.Err()
}

func transfer(ctx context.Context, from, to string) error {
	fmt.Println("moved stock from", from, "to", to)
	return ctx.Err()
}

func send(ctx context.Context, batch string) error {
	fmt.Println("sent", batch)
	return ctx.Err()
}

// The Prometheus exporter as the client's observer: docs/operations.md's
// "Metrics and alerts" shows newObservedClient and checkEvery.
func ExampleWithHooks_prometheus() {
	ms, stop := masters(3)
	defer stop()
	reg := prometheus.NewRegistry()
	client, m, err := newObservedClient(ms, reg)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()

	lock, err := client.TryLock(ctx, "report:nightly", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	if err := lock.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	checkCtx, stopChecks := context.WithTimeout(ctx, 250*time.Millisecond)
	defer stopChecks()
	checkEvery(checkCtx, client, m, 100*time.Millisecond) // until checkCtx ends

	families, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "quorumlock_lock_acquire_attempts_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			if s.GetCounter().GetValue() > 0 {
				fmt.Println(f.GetName(), s.GetLabel()[0].GetValue(), s.GetCounter().GetValue())
			}
		}
	}
	// Output: quorumlock_lock_acquire_attempts_total acquired 1
}

// newObservedClient returns a client whose events are quorumlock_lock_* metrics on reg, and
// the metrics, which also count what guards refuse: fence.RedisGuard{OnReject: m.FenceRejected},
// pgfence.Guard{Table: "inventory", OnReject: m.FenceRejected}.
func newObservedClient(masters []driver.Conn, reg prometheus.Registerer) (*redlock.Client, *redlockprom.Metrics, error) {
	m, err := redlockprom.New("quorumlock") // metrics named quorumlock_lock_*
	if err != nil {
		return nil, nil, err
	}
	if err := reg.Register(m); err != nil {
		return nil, nil, err
	}
	client, err := redlock.New(masters, redlock.WithHooks(m.Hooks()), redlock.WithRestartGuard(time.Second))
	if err != nil {
		return nil, nil, err
	}
	return client, m, nil
}

// checkEvery checks the client's nodes every interval until ctx ends, for the check alert.
func checkEvery(ctx context.Context, client *redlock.Client, m *redlockprom.Metrics, interval time.Duration) {
	for {
		report, err := client.Check(ctx)
		if err != nil {
			return // ctx ended: Check's only error
		}
		m.RecordCheck(report)
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}
