package redlock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/stretchr/testify/require"
	"quorumlock.dev/driver"
	"quorumlock.dev/driver/goredis"
	"quorumlock.dev/redlock/internal/fair"
	"quorumlock.dev/redlock/internal/plain"
)

// miniMasters starts n in-process Redis servers and a client for each.
func miniMasters(t testing.TB, n int) ([]*miniredis.Miniredis, []Master) {
	t.Helper()
	servers := make([]*miniredis.Miniredis, n)
	masters := make([]Master, n)
	for i := range n {
		servers[i] = miniredis.RunT(t)
		masters[i] = goredis.Conn(newClient(t, servers[i].Addr()))
	}
	return servers, masters
}

// newClient is a go-redis client with library defaults except retries: a
// test wants one answer per call.
// Master is a master as the tests hand them to New.
type Master = driver.Conn

// full is a master with every capability of the go-redis adapter: a test's
// wrapper that embeds it keeps them (one that embeds Master hides them).
type full interface {
	driver.Conn
	driver.Subscriber
	driver.Inspector
	driver.Describer
}

// raw is the go-redis client behind a master of miniMasters or redisMasters.
func raw(m Master) *redis.Client { return goredis.Unwrap(m).(*redis.Client) }

// conns makes masters of go-redis clients (through the adapter) and of
// masters (as they are); a nil stays nil.
func conns(ms ...any) []Master {
	out := make([]Master, len(ms))
	for i, m := range ms {
		switch m := m.(type) {
		case Master:
			out[i] = m
		case goredis.Client:
			out[i] = goredis.Conn(m)
		}
	}
	return out
}

// hooksOf makes Hooks of the methods o has: a test's recorder keeps what
// it is told in its own type. RenewalFailed hears the end of a renewed
// lock that was not unlocked, with the cause of its context.
func hooksOf(o any) Hooks {
	var h Hooks
	if v, ok := o.(interface {
		Attempted(took, validity time.Duration, err error)
	}); ok {
		h.Attempt = func(_ context.Context, e Event) { v.Attempted(e.Took, e.Validity, e.Err) }
	}
	if v, ok := o.(interface {
		Voted(addr, vote string, took time.Duration)
	}); ok {
		h.Vote = func(_ context.Context, e Event) { v.Voted(e.Master, e.Outcome, e.Took) }
	}
	if v, ok := o.(interface{ Extended(err error) }); ok {
		h.Extend = func(context.Context, string) func(Event) { return func(e Event) { v.Extended(e.Err) } }
	}
	if v, ok := o.(interface{ Waiting(delta int) }); ok {
		h.Waiting = v.Waiting
	}
	if v, ok := o.(interface {
		RenewalFailed(resource string, reason error)
	}); ok {
		h.Hold = func(_ context.Context, resource string) func(Event) {
			return func(e Event) {
				if e.Renewed && e.Outcome != "unlocked" {
					v.RenewalFailed(resource, e.Err)
				}
			}
		}
	}
	if v, ok := o.(interface {
		MasterQuarantined(addr string, until time.Time)
		MasterRestored(addr string)
	}); ok {
		h.MasterQuarantined, h.MasterRestored = v.MasterQuarantined, v.MasterRestored
	}
	if v, ok := o.(interface {
		MasterDrift(addr string, rate float64)
		MasterClockJumped(addr string, by time.Duration)
	}); ok {
		h.MasterDrift, h.MasterClockJumped = v.MasterDrift, v.MasterClockJumped
	}
	return h
}

func newClient(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, DialerRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newTestClient is a client of masters with a node timeout of 250 ms unless
// opts set one: a test on real servers under -race on a loaded machine
// misses the default 50 ms now and then, and a test that is about the
// timeout sets its own.
func newTestClient(t testing.TB, masters []Master, opts ...Option) *Client {
	t.Helper()
	c, err := New(masters, append([]Option{WithNodeTimeout(250 * time.Millisecond)}, opts...)...)
	require.NoError(t, err)
	return c
}

// seq numbers resources so no two tests share a key.
var seq atomic.Int64

func resourceName(t testing.TB) string {
	return fmt.Sprintf("test:%s:%d", t.Name(), seq.Add(1))
}

// holders counts the masters whose lock key holds token.
func holders(t testing.TB, servers []*miniredis.Miniredis, resource, token string) int {
	t.Helper()
	n := 0
	for _, s := range servers {
		if v, err := s.Get("lock:" + resource); err == nil && v == token {
			n++
		}
	}
	return n
}

// countingMinter is a fence.Minter that counts calls and can fail or stall.
type countingMinter struct {
	calls atomic.Int64
	next  atomic.Uint64
	err   error
	delay time.Duration
	check func() // run inside Mint, before returning
}

func (m *countingMinter) Mint(ctx context.Context, resource string) (uint64, error) {
	m.calls.Add(1)
	if m.check != nil {
		m.check()
	}
	if m.delay > 0 {
		select {
		case <-time.After(m.delay):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	if m.err != nil {
		return 0, m.err
	}
	return m.next.Add(1), nil
}

// settle waits until every master holds l's key: TryLock returns at a
// majority, and the others may still be setting it.
func settle(t testing.TB, servers []*miniredis.Miniredis, resource string, l *Lock) {
	t.Helper()
	require.Eventually(t, func() bool { return holders(t, servers, resource, l.Token()) == len(servers) },
		time.Second, time.Millisecond, "not every master took the key")
}

// masterErrors lists the per-master errors joined into err.
func masterErrors(err error) []*MasterError {
	var out []*MasterError
	var me *MasterError
	if errors.As(err, &me) && err == error(me) {
		return []*MasterError{me}
	}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range joined.Unwrap() {
			out = append(out, masterErrors(e)...)
		}
	}
	return out
}

// leastCycleAllocs counts the allocations of one TryLock(ttl) + Unlock
// cycle on each client, rounds times, the clients alternated so that a
// drift of the machine hits all of them, and returns the least count of
// each. The cycles rotate over 64 resources, as BenchmarkLockUnlock does:
// Unlock releases the minority in the background, so the next TryLock
// takes another resource; those background releases only ever add
// allocations to a measurement, hence the least.
// roomy is the node timeout of the clients whose allocations are counted:
// a release that missed the default 50 ms on a loaded machine under -race
// failed the count, which is not what it measures.
var roomy = WithNodeTimeout(250 * time.Millisecond)

func leastCycleAllocs(t *testing.T, ttl time.Duration, rounds int, clients ...*Client) []float64 {
	t.Helper()
	measure := func(c *Client) float64 {
		ctx := context.Background()
		resources := make([]string, 64)
		for i := range resources {
			resources[i] = resourceName(t)
		}
		n := 0
		cycle := func() {
			l, err := c.TryLock(ctx, resources[n%len(resources)], ttl)
			n++
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		for range 100 {
			cycle() // warm the pools
		}
		return testing.AllocsPerRun(300, cycle)
	}
	least := make([]float64, len(clients))
	for i := range least {
		least[i] = math.Inf(1)
	}
	for range rounds {
		for i, c := range clients {
			least[i] = min(least[i], measure(c))
		}
	}
	return least
}

// fairOf is c's fair policy (c was made WithFairness).
func fairOf(c *Client) *fair.Policy[*Lock] { return c.policy.(*fair.Policy[*Lock]) }

// probeMaster is the master the plain policy's woken attempts on resource
// ask first.
func (c *Client) probeMaster(resource string) int {
	return plain.ProbeMaster[*Lock](policyCore{c}, resource)
}
