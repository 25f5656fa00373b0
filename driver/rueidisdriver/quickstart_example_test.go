package rueidisdriver_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"quorumlock.dev/driver/rueidisdriver"
	"quorumlock.dev/redlock"
)

// The README's quick start on rueidis clients, on in-process servers: the
// README shows the lines of nightly that differ from its go-redis version
// (cmd/redlock-bench/internal/doccheck checks them).
func Example_quickStart() {
	var addrs []string
	for range 3 {
		srv, err := miniredis.Run() // in production, three independent Redis masters
		if err != nil {
			log.Fatal(err)
		}
		defer srv.Close()
		addrs = append(addrs, srv.Addr())
	}
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
	var clients []rueidis.Client
	for _, addr := range masterAddrs {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
		if c == nil { // ForceSingleClient: a client even while its master is down
			return err
		}
		defer c.Close()
		clients = append(clients, c)
	}
	client, err := redlock.New(rueidisdriver.Masters(clients...))
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

func writeReport(ctx context.Context) error {
	fmt.Println("report written")
	return ctx.Err()
}
