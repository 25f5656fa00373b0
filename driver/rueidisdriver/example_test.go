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

// Three independent masters, one rueidis client each.
func ExampleMasters() {
	var clients []rueidis.Client
	for range 3 {
		srv, err := miniredis.Run() // in production, three independent Redis masters
		if err != nil {
			log.Fatal(err)
		}
		defer srv.Close()
		c, err := rueidis.NewClient(rueidis.ClientOption{
			InitAddress:       []string{srv.Addr()},
			ForceSingleClient: true, // one server: made even while it is down
			DisableCache:      true, // the lock reads nothing it could cache
			// Many goroutines locking at once: one pipelined connection, whose
			// writes wait up to 100 µs for more calls while others are waiting.
			PipelineMultiplex: -1,
			MaxFlushDelay:     100 * time.Microsecond,
			// A master that hangs: its pipeline's calls end after 2 s, not 10.
			ConnWriteTimeout: 2 * time.Second,
		})
		if c == nil {
			log.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	locks, err := redlock.New(rueidisdriver.Masters(clients...))
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	ctx := context.Background()
	l, err := locks.TryLock(ctx, "report:2026-12", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("held:", l.Resource())
	fmt.Println("released:", l.Unlock(ctx))
	// Output:
	// held: report:2026-12
	// released: <nil>
}
