package etcdfence_test

import (
	"context"
	"errors"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"quorumlock.dev/fence/etcdfence"
	"quorumlock.dev/redlock"
)

// etcdfence.Minter mints for redlock.WithFence.
var _ redlock.Minter = (*etcdfence.Minter)(nil)

// A Redlock client whose fences are etcd revisions (run it against your
// masters and etcd cluster). TryLock bounds the mint by the lock's validity:
// without an etcd quorum it fails with redlock.ErrFenceUnavailable and
// hands out no lock.
func ExampleMinter() {
	ctx := context.Background()
	var masters []redlock.Master // the Redis masters, one client each
	if masters == nil {
		return // this example shows the calls; it needs masters and etcd to run
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: []string{"etcd-1:2379", "etcd-2:2379", "etcd-3:2379"},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	minter, err := etcdfence.New(cli)
	if err != nil {
		log.Fatal(err)
	}
	client, err := redlock.New(masters, redlock.WithFence(minter))
	if err != nil {
		log.Fatal(err)
	}
	l, err := client.TryLock(ctx, "alloc:WH-01", 10*time.Second)
	switch {
	case errors.Is(err, redlock.ErrFenceUnavailable):
		// the quorum was won but etcd minted no fence in time: no lock
		return
	case err != nil:
		return
	}
	token, _ := l.Fence() // the revision of the Put to fence:alloc:WH-01
	_ = token             // pass it to the storage's guard with every write
	_ = l.Unlock(ctx)
}
