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
)

// A fenced inventory update: the stock of WH-01 lives in Redis behind a
// RedisGuard. Holder A is paused past its lease; B takes the lock and
// writes; A's late write carries the older fence and is refused.
func Example_fencedInventoryUpdate() {
	ctx := context.Background()
	node := func() *redis.Client {
		srv, err := miniredis.Run()
		if err != nil {
			log.Fatal(err)
		}
		return redis.NewClient(&redis.Options{Addr: srv.Addr()})
	}
	master, counterNode, storage := node(), node(), node()
	counter, err := fence.NewRedisCounter(counterNode)
	if err != nil {
		log.Fatal(err)
	}
	client, err := redlock.New([]redlock.Master{master}, redlock.WithFence(counter))
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
