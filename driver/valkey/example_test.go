package valkey_test

import (
	"context"
	"log"
	"time"

	"github.com/valkey-io/valkey-go"

	valkeydriver "quorumlock.dev/driver/valkey"
	"quorumlock.dev/redlock"
)

// Three independent masters, one valkey client each.
func ExampleMasters() {
	var clients []valkey.Client
	for _, addr := range []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"} {
		c, err := valkey.NewClient(valkey.ClientOption{
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
	locks, err := redlock.New(valkeydriver.Masters(clients...))
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
