package redlock

import (
	"context"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/redlock/internal/retry"
)

// A release that got no reply from its master (a timeout, a refused or
// reset connection) may have left the key there: the master may have
// applied the acquiring call, or may apply it late. Left alone, such a key
// of a lost attempt keeps the resource from every caller for a whole TTL
// (a burst of 100 callers on a loaded machine left no holder and five
// keys of five lost attempts for a minute). So the release is tried again
// in the background, by one goroutine per master that has releases to
// retry, one try each node timeout (only the oldest release is tried while
// the master gives no reply), until the master replies (the script ran: the
// key is released or was not ours) or the key's TTL since the retry was
// queued has passed: then Redis has let it go by itself (package retry).
// A reply to any other call to that master has them tried at once.
// Removals of fair queue entries that got no reply are retried the same
// way. Client.Close stops the retries and waits for them at most one node
// timeout.

// retryMax is the TTL assumed for a key whose TTL is not known.
const retryMax = time.Second

// newRetries is the client's queue of calls to retry (package retry).
func (c *Client) newRetries() *retry.Queue {
	try := func(ctx context.Context, i int, script *driver.Script, keys []string, args []any) error {
		_, err := c.masters[i].Eval(ctx, script, keys, args...)
		return err
	}
	now := func() time.Time {
		now, _ := c.clock.now()
		return now
	}
	failed := func(i int, res string, err error) {
		c.cfg.logger.Debug("redlock: release retry got no reply", "master", c.addrs[i], "resource", res, "err", err)
	}
	return retry.New(len(c.masters), try, now, c.cfg.nodeTimeout, failed)
}

// retryRelease queues a release of l's keys on master i with script and
// args, to be tried again after its first try got no reply.
func (c *Client) retryRelease(l *Lock, i int, script *driver.Script, args []any) {
	c.retryScript(i, script, l.keys, args, l.ttl, l.resource)
}

// retryScript queues script on master i, for a key that expires within
// ttl (0: unknown, retryMax).
func (c *Client) retryScript(i int, script *driver.Script, keys []string, args []any, ttl time.Duration, res string) {
	if ttl <= 0 {
		ttl = retryMax
	}
	c.retries.Add(i, script, keys, args, ttl, res)
}

// pendingReleases is how many releases wait to be tried again, for tests.
func (c *Client) pendingReleases() int { return c.retries.Pending() }
