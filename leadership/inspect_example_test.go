package leadership_test

import (
	"context"
	"fmt"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/fence"
	"quorumlock.dev/internal/harness/memredis"
	"quorumlock.dev/leadership"
	"quorumlock.dev/redlock"
)

// whoLeads prints, for an operator, who leads role and how long its term
// has left on each master. client is any client over the role's masters
// (with redlock.WithFence on a counter that can be read, the counter's
// last fence too); it writes nothing and mints nothing.
func whoLeads(ctx context.Context, client *redlock.Client, role string) error {
	in, err := leadership.Inspect(ctx, client, role)
	if err != nil {
		return err // redlock.ErrQuorumUnavailable: a majority did not answer
	}
	if !in.Leading {
		fmt.Println("nobody leads", role)
		return nil
	}
	fmt.Printf("%s leads %s, term fence %d (counter's last: %d)\n",
		in.Leader.Identity, role, in.Leader.Fence, in.Lock.Fence)
	for i, k := range in.Lock.Masters { // k.Addr names the master
		fmt.Println("master", i, "holds the term:", k.Token == in.Lock.Holder, "left:", k.TTL.Round(10*time.Second))
	}
	return nil
}

func ExampleInspect() {
	ctx := context.Background()
	servers := []*memredis.Server{memredis.New(), memredis.New(), memredis.New()}
	var masters []driver.Conn
	for _, s := range servers {
		masters = append(masters, s.Conn())
	}
	counterNode := memredis.New()
	counterNode.Set("fence:leader:{relay}", "41", 0) // the last fence minted for the role
	counter, _ := fence.NewRedisCounter(counterNode.Conn())
	client, _ := redlock.New(masters, redlock.WithFence(counter), redlock.WithNodeTimeout(time.Second)) // room on a loaded machine
	defer client.Close()
	e, _ := leadership.New(client, "relay", leadership.WithIdentity("relay-1"), leadership.WithTTL(30*time.Second))
	term, err := e.Campaign(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	// Campaign returns at a majority: give the last master's lock key a
	// moment (its record may stay missing there, if the record's write
	// reached it before the key: a majority of records is what counts).
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if _, ok := servers[2].Get("lock:leader:{relay}"); ok {
			break
		}
	}
	if err := whoLeads(ctx, client, "relay"); err != nil {
		fmt.Println(err)
	}
	_ = term.Resign(ctx)
	if err := whoLeads(ctx, client, "relay"); err != nil {
		fmt.Println(err)
	}
	// Output:
	// relay-1 leads relay, term fence 42 (counter's last: 42)
	// master 0 holds the term: true left: 30s
	// master 1 holds the term: true left: 30s
	// master 2 holds the term: true left: 30s
	// nobody leads relay
}
