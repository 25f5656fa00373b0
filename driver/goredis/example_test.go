package goredis_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"quorumlock.dev/driver"
	"quorumlock.dev/driver/goredis"
)

// release deletes a lock's key only while it holds the caller's token.
var release = driver.NewScript(`
if redis.call("get", KEYS[1]) == ARGV[1] then
	return redis.call("del", KEYS[1])
end
return 0`)

func ExampleConn() {
	srv, err := miniredis.Run() // in production, a Redis master
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	// MaxRetries -1: a failed command is never sent again.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	defer rdb.Close()
	conn := goredis.Conn(rdb)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ok, err := conn.SetNX(ctx, "lock:report", "token-1", 30*time.Second)
	fmt.Println("first:", ok, err)
	ok, err = conn.SetNX(ctx, "lock:report", "token-2", 30*time.Second)
	fmt.Println("second:", ok, err)

	n, err := conn.Eval(ctx, release, []string{"lock:report"}, "token-2")
	fmt.Println("released by token-2:", n, err)
	n, err = conn.Eval(ctx, release, []string{"lock:report"}, "token-1")
	fmt.Println("released by token-1:", n, err)

	_, push := conn.(driver.Subscriber)
	fmt.Println("push wake-up:", push, "never retries:", conn.(driver.Describer).Describe().NeverRetries)
	// Output:
	// first: true <nil>
	// second: false <nil>
	// released by token-2: 0 <nil>
	// released by token-1: 1 <nil>
	// push wake-up: true never retries: true
}
