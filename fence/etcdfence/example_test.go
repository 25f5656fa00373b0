package etcdfence_test

import (
	"context"
	"errors"
	"log"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"quorumlock.dev/fence/etcdfence"
	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
	"quorumlock.dev/redlock"

	"quorumlock.dev/driver"

	"quorumlock.dev/driver/goredis"
)

// etcdfence.Minter mints for redlock.WithFence.
var _ redlock.Minter = (*etcdfence.Minter)(nil)

// A Redlock client whose fences are etcd revisions: lockWithEtcdFence, run
// against your masters and etcd cluster (TestLockWithEtcdFence runs it on
// in-process servers). TryLock bounds the mint by the lock's validity:
// without an etcd quorum it fails with redlock.ErrFenceUnavailable and hands
// out no lock.
func ExampleMinter() {
	var masters []driver.Conn // your Redis masters: goredis.Masters(rdb1, rdb2, rdb3)
	if masters == nil {
		return // this example shows the calls; it needs masters and etcd to run
	}
	endpoints := []string{"etcd-1:2379", "etcd-2:2379", "etcd-3:2379"}
	if err := lockWithEtcdFence(context.Background(), masters, endpoints); err != nil {
		log.Fatal(err)
	}
}

// lockWithEtcdFence takes alloc:WH-01 with a fence that is an etcd revision;
// endpoints are the etcd cluster's members.
func lockWithEtcdFence(ctx context.Context, masters []driver.Conn, endpoints []string) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints})
	if err != nil {
		return err
	}
	defer cli.Close()
	minter, err := etcdfence.New(cli) // or etcdfence.New(namespace.NewKV(cli.KV, "myapp/"))
	if err != nil {
		return err
	}
	client, err := redlock.New(masters, redlock.WithFence(minter))
	if err != nil {
		return err
	}
	defer client.Close()

	l, err := client.TryLock(ctx, "alloc:WH-01", 10*time.Second)
	if err != nil {
		// errors.Is(err, redlock.ErrFenceUnavailable): the quorum was won, etcd minted nothing in time, no lock
		return err
	}
	defer l.Unlock(ctx)
	token, _ := l.Fence() // the revision of the Put to fence:alloc:WH-01
	return write(ctx, token)
}

// write stands for a write to storage that checks the fence.
func write(ctx context.Context, token uint64) error {
	if token == 0 {
		return errors.New("no fence")
	}
	return ctx.Err()
}

// TestLockWithEtcdFence runs lockWithEtcdFence on an in-process etcd member
// and three redis-servers.
func TestLockWithEtcdFence(t *testing.T) {
	c := startCluster(t, 1)
	servers := redistest.StartN(t, 3, redisserver.Options{})
	masters := make([]driver.Conn, len(servers))
	for i, s := range servers {
		masters[i] = goredis.Conn(redistest.Client(t, s.Addr()))
	}
	var err error
	// The example keeps the default 50 ms node timeout, which a loaded
	// machine under -race can miss: a few attempts.
	for range 5 {
		err = lockWithEtcdFence(t.Context(), masters, []string{c.members[0].clientURL})
		if !errors.Is(err, redlock.ErrQuorumUnavailable) {
			break
		}
	}
	require.NoError(t, err)
}
