package redlock_test

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

// masters starts n in-process Redis servers for the examples; in production
// these are the clients of independent Redis masters.
func masters(n int) ([]redlock.Master, func()) {
	var ms []redlock.Master
	var stops []func()
	for range n {
		srv, err := miniredis.Run()
		if err != nil {
			log.Fatal(err)
		}
		c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		ms = append(ms, c)
		stops = append(stops, func() { _ = c.Close(); srv.Close() })
	}
	return ms, func() {
		for _, stop := range stops {
			stop()
		}
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
		fmt.Println("holding", lock.Resource(), "on a majority of", client.Masters(), "masters")
	}
	// Output: holding report:nightly on a majority of 5 masters
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
	counter, err := fence.NewRedisCounter(counterNode[0].(*redis.Client))
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

// printObserver stands in for a metrics adapter.
type printObserver struct{}

func (printObserver) RenewalFailed(resource string, reason error) {
	fmt.Println("renewal failed on", resource+":", reason)
}

func ExampleLock_Renew() {
	ms, stop := masters(3)
	defer stop()
	client, err := redlock.New(ms, redlock.WithObserver(printObserver{}))
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
	// renewal failed on outbox:relay: redlock: no progress since the last extension
	// lost: true stalled: true
}
