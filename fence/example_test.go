package fence_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"quorumlock.dev/fence"
	"quorumlock.dev/redlock"

	"quorumlock.dev/driver"
	"quorumlock.dev/driver/goredis"
)

// A fenced inventory update: the stock of WH-01 lives in Redis behind a
// RedisGuard. Holder A is paused past its lease; B takes the lock and
// writes; A's late write carries the older fence and is refused.
func Example_fencedInventoryUpdate() {
	ctx := context.Background()
	node := func() driver.Conn {
		srv, err := miniredis.Run()
		if err != nil {
			log.Fatal(err)
		}
		return goredis.Conn(redis.NewClient(&redis.Options{Addr: srv.Addr()}))
	}
	master, counterNode, storage := node(), node(), node()
	counter, err := fence.NewRedisCounter(counterNode)
	if err != nil {
		log.Fatal(err)
	}
	client, err := redlock.New([]driver.Conn{master}, redlock.WithFence(counter))
	if err != nil {
		log.Fatal(err)
	}
	var stock fence.RedisGuard

	a, err := client.TryLock(ctx, "alloc:WH-01", time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fa, _ := a.Fence()
	// A stops here (a long GC pause); its lease ends, and B is let in. The
	// example releases A's key to stand for the expiry.
	_ = a.Unlock(ctx)

	b, err := client.TryLock(ctx, "alloc:WH-01", time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fb, _ := b.Fence()
	if err := stock.Set(ctx, storage, "stock:WH-01", "99", fb, 0); err != nil {
		log.Fatal(err)
	}
	_ = b.Unlock(ctx)

	// A wakes up and writes what it computed before the pause.
	err = stock.Set(ctx, storage, "stock:WH-01", "99", fa, 0)
	fmt.Println("A's write refused:", errors.Is(err, fence.ErrFenceRejected))
	value, f, err := stock.Get(ctx, storage, "stock:WH-01")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("stock %s, written with B's fence: %t, newer than A's: %t\n", value, f == fb, f > fa)
	// Output:
	// A's write refused: true
	// stock 99, written with B's fence: true, newer than A's: true
}

// newNode starts an in-process Redis server for the examples and returns a
// go-redis client of it, adapted; stop closes both.
func newNode() (node driver.Conn, stop func()) {
	srv, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	return goredis.Conn(rdb), func() { _ = rdb.Close(); srv.Close() }
}

// docs/fencing.md's first example: a fenced client, and a lock whose fence
// goes with every write.
func ExampleNewRedisCounter() {
	var masters []driver.Conn
	for range 3 {
		master, stop := newNode()
		defer stop()
		masters = append(masters, master)
	}
	fenceNode, stop := newNode()
	defer stop()
	client, err := newFencedClient(masters, fenceNode)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	if err := allocate(ctx, client); err != nil {
		log.Fatal(err)
	}
	// Output: write carries a fence: true
}

// newFencedClient returns a client whose locks carry a fence minted on fenceNode, a Redis node
// that is none of the masters. Build one per process; Close it when the process ends.
func newFencedClient(masters []driver.Conn, fenceNode driver.Conn) (*redlock.Client, error) {
	counter, err := fence.NewRedisCounter(fenceNode) // or pgfence.NewCounter(pool)
	if err != nil {
		return nil, err
	}
	return redlock.New(masters, redlock.WithFence(counter))
}

func allocate(ctx context.Context, client *redlock.Client) error {
	lock, err := client.Lock(ctx, "alloc:WH-01", 30*time.Second)
	if err != nil {
		return err // ErrFenceUnavailable: no lock without a fence
	}
	defer lock.Unlock(ctx)
	token, _ := lock.Fence()
	// every write the lock protects carries token, and the storage checks it
	return write(ctx, token)
}

// write stands for a write to storage that checks the fence.
func write(ctx context.Context, token uint64) error {
	fmt.Println("write carries a fence:", token > 0)
	return ctx.Err()
}

// docs/fencing.md's repair after ErrCounterRegressed: Seed raises the counter
// above every fence it may have handed out.
func ExampleRedisCounter_Seed() {
	node, stop := newNode()
	defer stop()
	counter, err := fence.NewRedisCounter(node)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	before, err := counter.Mint(ctx, "alloc:WH-01")
	if err != nil {
		log.Fatal(err)
	}

	// Say the node's clock had been set back by a second.
	if err := reseed(ctx, counter, before, time.Second); err != nil {
		log.Fatal(err)
	}
	after, err := counter.Mint(ctx, "alloc:WH-01")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("above the last fence:", after > before)
	fmt.Println("above the clock:", after > uint64(time.Now().UnixMicro()))
	// Output:
	// above the last fence: true
	// above the clock: true
}

// reseed raises the counter of alloc:WH-01 above every fence that may have been handed out:
// maxFenceInStorage is the largest fence in storage, clockStep how far the node's clock was set back.
func reseed(ctx context.Context, counter *fence.RedisCounter, maxFenceInStorage uint64, clockStep time.Duration) error {
	atLeast := max(maxFenceInStorage, uint64(time.Now().UnixMicro())+uint64(clockStep.Microseconds()))
	return counter.Seed(ctx, "alloc:WH-01", atLeast) // never lowers; lifts this counter's refusal
}
