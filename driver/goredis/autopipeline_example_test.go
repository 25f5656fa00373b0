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

// go-redis's auto-pipelining client (experimental in go-redis v9.23) batches
// the calls of many goroutines on one connection per master.
func ExampleConn_autoPipeliner() {
	srv, err := miniredis.Run() // in production, a Redis master
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	defer rdb.Close()
	ap, err := rdb.AutoPipeline()
	if err != nil {
		log.Fatal(err)
	}
	defer ap.Close()
	conn := goredis.Conn(ap)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ok, err := conn.SetNX(ctx, "lock:report", "token-1", 30*time.Second)
	fmt.Println("set:", ok, err)
	_, push := conn.(driver.Subscriber)
	// Its client's options are not readable through it: Check reports them as unknown.
	fmt.Println("push wake-up:", push, "settings known:", driver.Describe(conn).Settings != nil)
	// Output:
	// set: true <nil>
	// push wake-up: true settings known: false
}
