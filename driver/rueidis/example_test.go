package rueidis_test

import (
	"context"
	"log"
	"time"

	"github.com/redis/rueidis"

	rueidisdriver "quorumlock.dev/driver/rueidis"
	"quorumlock.dev/redlock"
)

// Three independent masters, one rueidis client each.
func ExampleMasters() {
	var clients []rueidis.Client
	for _, addr := range []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"} {
		c, err := rueidis.NewClient(rueidis.ClientOption{
			InitAddress:      []string{addr},
			DisableCache:     true,            // the lock reads nothing it could cache
			ConnWriteTimeout: 2 * time.Second, // a hung master's connection is closed after this
		})
		if err != nil {
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
	defer l.Unlock(ctx)
}
