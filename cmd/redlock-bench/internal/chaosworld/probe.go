package chaosworld

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// PortClosed reports whether nothing accepts connections on addr.
func PortClosed(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return true
	}
	c.Close()
	return false
}

// RunID returns the run_id of the Redis server at addr.
func RunID(ctx context.Context, addr string) (string, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	info, err := c.InfoMap(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	id := info["Server"]["run_id"]
	if id == "" {
		return "", errors.New("chaos: INFO server has no run_id")
	}
	return id, nil
}

// Unresponsive reports whether a PING to addr (a master, or a proxy in front of one) misses
// the node timeout.
func Unresponsive(ctx context.Context, addr string, nodeTimeout time.Duration) bool {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: nodeTimeout, ReadTimeout: nodeTimeout, WriteTimeout: nodeTimeout})
	defer c.Close()
	return c.Ping(ctx).Err() != nil
}

// ServerTime is the Redis server's TIME.
func ServerTime(ctx context.Context, addr string) (time.Time, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	return c.Time(ctx).Result()
}

// WaitUntil polls cond every millisecond for at most d.
func WaitUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}
