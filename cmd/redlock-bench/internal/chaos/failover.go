package chaos

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"quorumlock.dev/cmd/redlock-bench/internal/chaosreport"
	"quorumlock.dev/cmd/redlock-bench/internal/chaosworker"
	"quorumlock.dev/cmd/redlock-bench/internal/sentinel"
	"quorumlock.dev/internal/harness/redisserver"
)

// A failover to a replica that lacks the key: master 0 under Sentinel loses its primary
// before the replica got the holder's key.

var failover = &scenario{
	name: "failover", variant: "sentinel", about: "a master's primary dies before its replica got our key; Sentinel promotes the replica",
	mustObserve: true, resources: 1, longHold: true, minTTL: 8 * time.Second, fault: func() injector { return &promoteReplica{} },
}

// promoteReplica makes a lock live on masters 0, 1 and 2 only (3 and 4 down), with master 0's
// replica holding back replication; kills master 0's primary, waits for Sentinel to promote
// the replica, which lacks the key, and brings 3 and 4 back empty: a contender can win 0, 3
// and 4 while the holder is inside.
type promoteReplica struct {
	group *sentinel.Group // master 0: a primary, its replica and the sentinels
}

// prepare makes master 0 a primary with a replica under Sentinel; the workers reach it
// through Sentinel.
func (p *promoteReplica) prepare(ctx context.Context, w *world) error {
	g, err := sentinel.Start(ctx, sentinel.Options{})
	if err != nil {
		return err
	}
	w.AddCleanup(func() { _ = g.Stop() })
	p.group = g
	w.Servers = make([]*redisserver.Server, w.cfg.Masters)
	w.Masters = make([]chaosworker.Master, w.cfg.Masters)
	w.Direct = make([]string, w.cfg.Masters) // "": the majority check does not ask master 0
	w.Masters[0] = chaosworker.Master{Sentinels: g.SentinelAddrs(), Name: g.MasterName()}
	return nil
}

func (p *promoteReplica) server(int) redisserver.Options { return redisserver.Options{} }

func (p *promoteReplica) inject(ctx context.Context, w *world) (chaosreport.Fault, error) {
	f := chaosreport.Fault{Start: time.Now()}
	for _, i := range []int{3, 4} {
		if err := w.Servers[i].Kill(); err != nil {
			return f, err
		}
	}
	if err := p.group.PauseReplication(ctx); err != nil {
		return f, err
	}
	op, err := w.Rec.Claimed(ctx, time.Now().Add(2*w.cfg.NodeTimeout), nil)
	if err != nil {
		return f, err
	}
	f.Resource = op.Resource
	h, ok := w.Rec.Holder(op.Worker, op.Resource)
	if !ok {
		return f, fmt.Errorf("no live holding for worker %d's claim on %s", op.Worker, op.Resource)
	}
	if err := p.group.KillPrimary(ctx); err != nil {
		return f, err
	}
	primary, err := p.group.WaitFailover(ctx)
	if err != nil {
		return f, err
	}
	c := redis.NewClient(&redis.Options{Addr: primary, MaxRetries: -1})
	tok, err := c.Get(ctx, "lock:"+op.Resource).Result()
	c.Close()
	// Verified: the promoted replica does not hold the holder's key.
	f.Injected = (err == nil && tok != h.Token) || errors.Is(err, redis.Nil)
	for _, i := range []int{3, 4} {
		if err := w.Servers[i].Restart(ctx); err != nil {
			return f, err
		}
	}
	f.End = time.Now()
	return f, nil
}
