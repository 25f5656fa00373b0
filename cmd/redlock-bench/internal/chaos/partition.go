package chaos

import (
	"context"
	"errors"
	"time"

	"quorumlock.dev/cmd/redlock-bench/internal/chaosreport"
	"quorumlock.dev/cmd/redlock-bench/internal/chaosworld"
	"quorumlock.dev/cmd/redlock-bench/internal/netns"
	"quorumlock.dev/internal/harness/redisserver"
)

// A network partition: the client cut off from a majority of the masters, each in a network
// namespace of its own.

var partition = &scenario{
	name: "partition", variant: "netns", about: "the client cut off from 3 of 5 masters (network namespaces, iptables DROP), then healed",
	fault: func() injector { return &cutOff{} }, judge: judgePartition,
}

// cutOff cuts the client off from masters 0, 1 and 2 for 1.5 s (packets dropped, so calls
// hang), then heals.
type cutOff struct {
	hosts []*netns.Host // each master's network namespace
}

// prepare puts each master in a network namespace of its own.
func (c *cutOff) prepare(ctx context.Context, w *world) error {
	c.hosts = make([]*netns.Host, w.cfg.Masters)
	for i := range c.hosts {
		h, err := netns.New(ctx)
		if errors.Is(err, netns.ErrNotRoot) || errors.Is(err, netns.ErrNoIptables) {
			return &skipError{err}
		}
		if err != nil {
			return err
		}
		// Registered before the servers start, so it runs after they stop: a namespace
		// with a process inside cannot be deleted.
		w.AddCleanup(func() { _ = h.Close() })
		c.hosts[i] = h
	}
	return nil
}

func (c *cutOff) server(i int) redisserver.Options {
	h := c.hosts[i]
	// Redis's protected mode refuses clients from outside loopback, and the host is outside.
	return redisserver.Options{Host: h.Addr(), Wrap: h.Wrap(), Args: []string{"--protected-mode", "no"}}
}

func (c *cutOff) inject(ctx context.Context, w *world) (chaosreport.Fault, error) {
	f := chaosreport.Fault{Start: time.Now(), Injected: true}
	for _, i := range []int{0, 1, 2} {
		if err := c.hosts[i].Partition(ctx); err != nil {
			return f, err
		}
		f.Injected = f.Injected && chaosworld.Unresponsive(ctx, w.Direct[i], w.cfg.NodeTimeout)
	}
	time.Sleep(1500 * time.Millisecond)
	for _, i := range []int{0, 1, 2} {
		if err := c.hosts[i].Heal(ctx); err != nil {
			return f, err
		}
	}
	f.End = time.Now()
	return f, nil
}

func judgePartition(cfg Config, runs []chaosreport.Run, r *Row, fail func(string, ...any)) {
	if r.Unavailable == 0 {
		fail("no attempt found the quorum unavailable while a majority was cut off")
	}
	judgeRecovery(cfg, r, fail)
}
