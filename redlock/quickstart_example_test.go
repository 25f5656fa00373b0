package redlock_test

import (
	"context"
	"fmt"
	"log"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"quorumlock.dev/driver"
	"quorumlock.dev/driver/goredis"
	"quorumlock.dev/fence"
	"quorumlock.dev/redlock"
)

// The README's opening program, on in-process servers: nightly is the README's
// code, word for word (cmd/redlock-bench/internal/doccheck checks it).
func Example_minimal() {
	addrs, stop := servers(3)
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	if err := nightly(ctx, addrs); err != nil {
		log.Fatal(err)
	}
	// Output:
	// report written
}

// nightly writes the report in one process at a time.
func nightly(ctx context.Context, masterAddrs []string) error {
	var rdbs []*redis.Client
	for _, addr := range masterAddrs { // independent masters; one is the single-instance mode
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		rdbs = append(rdbs, rdb)
	}
	client, err := redlock.New(goredis.Masters(rdbs...))
	if err != nil {
		return err
	}
	defer client.Close()
	lock, err := client.Lock(ctx, "report:nightly", 30*time.Second) // waits while another process holds it
	if err != nil {
		return err
	}
	defer lock.Unlock(ctx)
	return writeReport(lock.Context()) // lock.Context() ends if the lock is lost
}

// The README's fenced write, on in-process servers: stocktake is the README's
// code, word for word.
func Example_fencedWrite() {
	ms, stopMasters := masters(3)
	defer stopMasters()
	addrs, stopNodes := servers(2)
	defer stopNodes()
	counterNode := redis.NewClient(&redis.Options{Addr: addrs[0]})
	defer counterNode.Close()
	stockNode := redis.NewClient(&redis.Options{Addr: addrs[1]})
	defer stockNode.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	if err := stocktake(ctx, ms, goredis.Conn(counterNode), goredis.Conn(stockNode), "WH-01", 99); err != nil {
		log.Fatal(err)
	}
	var guard fence.RedisGuard
	qty, _, err := guard.Get(ctx, goredis.Conn(stockNode), "stock:WH-01")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("stock:WH-01 =", qty)
	// Output:
	// stock:WH-01 = 99
}

// stocktake stores a counted quantity under a fenced lock.
func stocktake(ctx context.Context, masters []driver.Conn, counterNode, stock driver.Conn, sku string, qty int) error {
	counter, err := fence.NewRedisCounter(counterNode) // a node of its own, none of the masters
	if err != nil {
		return err
	}
	client, err := redlock.New(masters, redlock.WithFence(counter))
	if err != nil {
		return err
	}
	defer client.Close()
	lock, err := client.Lock(ctx, "stocktake:"+sku, 30*time.Second)
	if err != nil {
		return err
	}
	defer lock.Unlock(ctx)
	token, _ := lock.Fence() // there whenever the client was built WithFence
	var guard fence.RedisGuard
	// Refused, wrapping fence.ErrFenceRejected, once a newer holder has written: this lock was stale.
	return guard.Set(ctx, stock, "stock:"+sku, strconv.Itoa(qty), token, 0)
}
