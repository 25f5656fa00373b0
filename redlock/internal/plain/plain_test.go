package plain

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/driver"
	"quorumlock.dev/driver/goredis"
	"quorumlock.dev/internal/harness/memredis"
	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
	"quorumlock.dev/quorum"
	"quorumlock.dev/redlock/internal/push"
)

// lock is a lock as the tests give the policy: a token.
type lock string

func (l lock) Token() string { return string(l) }

func client(t *testing.T, addr string) driver.Conn {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
	t.Cleanup(func() { _ = c.Close() })
	return goredis.Conn(c)
}

// TestProbeScript: probe.lua, as probeCall reads it, on a real server,
// miniredis and the simulator's memredis: a free key is set; a held one is
// refused with its holder and PTTL; a key of another type is refused with
// no holder read (the release after the loss tells ErrWrongType).
func TestProbeScript(t *testing.T) {
	real := client(t, redistest.Start(t, redisserver.Options{}).Addr())
	mini := client(t, miniredis.RunT(t).Addr())
	mem := memredis.New()
	makeHash := driver.NewScript("redis.call('HSET', KEYS[1], 'f', 'v') return 1")
	for name, m := range map[string]driver.Conn{"redis-server": real, "miniredis": mini, "memredis": mem.Conn()} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			key := "lock:probe-" + name
			a := &probeAsk[lock]{keys: []string{key}}
			set, err := a.probeCall(ctx, m, "first", 60_000)
			require.NoError(t, err)
			assert.True(t, set, "a free key was not set")
			assert.False(t, a.holder.OK)

			a = &probeAsk[lock]{keys: []string{key}}
			set, err = a.probeCall(ctx, m, "second", 60_000)
			require.NoError(t, err)
			assert.False(t, set, "a held key was set")
			assert.True(t, a.holder.OK)
			assert.Equal(t, "first", a.holder.Token)
			assert.Greater(t, a.holder.PTTL, int64(50_000))
			assert.LessOrEqual(t, a.holder.PTTL, int64(60_000))

			other := key + ":hash"
			_, err = m.Eval(ctx, makeHash, []string{other})
			require.NoError(t, err)
			a = &probeAsk[lock]{keys: []string{other}}
			set, err = a.probeCall(ctx, m, "third", 60_000)
			require.NoError(t, err)
			assert.False(t, set, "a key of another type was set")
			assert.False(t, a.holder.OK, "a holder was read from a key of another type")
			assert.True(t, a.wrongType, "a key of another type was not told")
		})
	}
	// A reply the script cannot give (a proxy, another server) is a typed
	// error of the master, not a refusal.
	for _, v := range []any{"OK", int64(2), []any{"first"}, []any{"first", "soon"}} {
		a := &probeAsk[lock]{keys: []string{"lock:probe"}}
		_, err := a.probeCall(context.Background(), replying{mem.Conn(), v}, "t", 60_000)
		assert.ErrorIs(t, err, driver.ErrUnexpectedReply, "reply %#v", v)
		assert.False(t, a.holder.OK, "reply %#v read as a holder", v)
	}
}

// replying is a master whose scripts all reply v.
type replying struct {
	driver.Conn
	v any
}

func (r replying) Eval(context.Context, *driver.Script, []string, ...any) (any, error) {
	return r.v, nil
}

// TestUnasked: a round whose probe master never answered says nothing of
// the masters the probe held back; one whose probe answered does.
func TestUnasked(t *testing.T) { synctest.Test(t, testUnasked) }

func testUnasked(t *testing.T) {
	a := &probeAsk[lock]{p: 1}
	answered := quorum.Settled([]bool{true, false, true})
	// A round whose probe master is still out when it ends.
	out := make(chan struct{})
	defer close(out)
	hung := quorum.Group{Nodes: 3, Need: 2, Timeout: time.Millisecond}.Do(context.Background(), func(ctx context.Context, i int) (bool, error) {
		if i == 1 {
			<-out // returns after the round ended
		}
		return false, nil
	})
	assert.True(t, a.Unasked(hung, 0))
	assert.True(t, a.Unasked(hung, 2))
	assert.False(t, a.Unasked(hung, 1), "the probe master's own call is asked")
	assert.False(t, a.Unasked(answered, 0), "the probe master answered: the others were asked")
}

// TestReleasesToWait: how many of the holder's release messages wake a
// waiter on 5 masters (quorum 3).
func TestReleasesToWait(t *testing.T) {
	refused := quorum.Settled([]bool{false, false, false, false, false})
	held := push5(500, 500, 500, 500, 500)
	assert.Equal(t, 3, releasesToWait(5, 3, refused, held, false), "held on all five: three releases free a majority")
	assert.Equal(t, 1, releasesToWait(5, 3, refused, held, true), "lost at the probe master: its release is the one")
	agreed := quorum.Settled([]bool{true, false, false, false, false})
	gone := push5(500, 500, 500, -2, 500)
	assert.Equal(t, 1, releasesToWait(5, 3, agreed, gone, false), "ours on one, gone on one: one release more")
}

// push5 is what five masters said of the key: held by one token with these
// PTTLs (-2: gone).
func push5(pttls ...int64) []push.Holder {
	out := make([]push.Holder, len(pttls))
	for i, p := range pttls {
		out[i] = push.Holder{OK: true, Token: "h", PTTL: p}
		if p == -2 {
			out[i].Token = ""
		}
	}
	return out
}
