package leadership_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/leadership"
	"quorumlock.dev/redlock"
)

// TestInspect: an operator's read of a role, in virtual time: nobody; a
// leader with its identity, the fence its term began with (the same as
// the counter's last), the time left on each master; a master that does
// not answer; a majority that does not; a lock held without a record (a
// term that is starting, or no term at all); the role after Resign. It
// writes nothing and mints nothing.
func TestInspect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 5)
		ctx := context.Background()
		reader := c.client(t)
		const resource = "leader:{relay}"

		in, err := leadership.Inspect(ctx, reader, "relay")
		require.NoError(t, err)
		assert.Equal(t, "relay", in.Role)
		assert.False(t, in.Leading)
		assert.Empty(t, in.Lock.Holder)
		assert.False(t, in.Lock.FenceKnown, "nothing was minted for the role yet")
		require.Len(t, in.Records, 5)
		for _, r := range in.Records {
			assert.Equal(t, leadership.Record{}, r)
		}

		term, err := c.candidate(t, "relay-7").Campaign(ctx)
		require.NoError(t, err)
		time.Sleep(ttl / 4)
		term.Progress()
		synctest.Wait()
		keys := c.keysOf()
		in, err = leadership.Inspect(ctx, reader, "relay")
		require.NoError(t, err)
		assert.True(t, in.Leading)
		assert.Equal(t, leadership.Info{Identity: "relay-7", Fence: term.Fence()}, in.Leader)
		assert.NotEmpty(t, in.Lock.Holder)
		require.True(t, in.Lock.FenceKnown)
		assert.Equal(t, term.Fence(), in.Lock.Fence, "the counter's last fence is the term's")
		for i, k := range in.Lock.Masters {
			assert.Equal(t, in.Lock.Holder, k.Token, "master %d", i)
			assert.Positive(t, k.TTL, "master %d", i)
			assert.LessOrEqual(t, k.TTL, ttl, "master %d", i)
			assert.Equal(t, leadership.Record{Token: in.Lock.Holder, Identity: "relay-7", Fence: term.Fence(), Current: true},
				in.Records[i], "master %d", i)
		}
		_, err = leadership.Inspect(ctx, reader, "relay")
		require.NoError(t, err)
		assert.Equal(t, keys, c.keysOf(), "Inspect wrote to a master")
		last, ok, err := c.counter.Last(ctx, resource)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, term.Fence(), last, "Inspect minted a fence")

		c.servers[4].Hang()
		in, err = leadership.Inspect(ctx, reader, "relay")
		require.NoError(t, err, "one master of five hung is no outage")
		assert.True(t, in.Leading)
		assert.Error(t, in.Records[4].Err)
		assert.Error(t, in.Lock.Masters[4].Err)
		c.servers[3].Hang()
		c.servers[2].Hang()
		in, err = leadership.Inspect(ctx, reader, "relay")
		assert.ErrorIs(t, err, redlock.ErrQuorumUnavailable)
		assert.False(t, in.Leading, "two masters of five name a leader: no majority")
		for _, s := range c.servers[2:] {
			s.Resume()
		}
		term.Progress()
		require.NoError(t, term.Resign(ctx))

		in, err = leadership.Inspect(ctx, reader, "relay")
		require.NoError(t, err)
		assert.False(t, in.Leading, "a leader after Resign")
		assert.Empty(t, in.Lock.Holder)

		// The role's lock taken without a term: a holder, but nobody leads.
		lk, err := reader.TryLock(ctx, resource, ttl)
		require.NoError(t, err)
		in, err = leadership.Inspect(ctx, reader, "relay")
		require.NoError(t, err)
		assert.Equal(t, lk.Token(), in.Lock.Holder)
		assert.False(t, in.Leading)
		assert.Greater(t, in.Lock.Fence, term.Fence(), "the lock's own fence, minted after the term's")
		require.NoError(t, lk.Unlock(ctx))
	})
}

// TestInspectStaleRecord: a record that an earlier term left on a master
// (its withdrawal lost) does not name a leader once another token holds
// the lock there.
func TestInspectStaleRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3)
		ctx := context.Background()
		reader := c.client(t)
		term, err := c.candidate(t, "a").Campaign(ctx)
		require.NoError(t, err)
		synctest.Wait()
		stale, ok := c.servers[0].Get("leader:{relay}")
		require.True(t, ok)
		require.NoError(t, term.Resign(ctx))
		for _, s := range c.servers {
			s.Set("leader:{relay}", stale, 0) // as if every withdrawal was lost
		}
		lk, err := reader.TryLock(ctx, "leader:{relay}", ttl)
		require.NoError(t, err)
		in, err := leadership.Inspect(ctx, reader, "relay")
		require.NoError(t, err)
		assert.False(t, in.Leading, "a stale record named a leader")
		assert.Equal(t, lk.Token(), in.Lock.Holder)
		for _, r := range in.Records {
			assert.Equal(t, "a", r.Identity)
			assert.False(t, r.Current)
		}
		require.NoError(t, lk.Unlock(ctx))
	})
}

func TestInspectInvalid(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3)
		reader := c.client(t)
		for _, role := range []string{"", "a{b}", "a\nb"} {
			_, err := leadership.Inspect(context.Background(), reader, role)
			assert.ErrorIs(t, err, leadership.ErrInvalidArgument, "role %q", role)
		}
		_, err := leadership.Inspect(context.Background(), nil, "relay")
		assert.ErrorIs(t, err, leadership.ErrInvalidArgument)
	})
}

// keysOf is every key of every master with its value.
func (c *cluster) keysOf() []map[string]string {
	var out []map[string]string
	for _, s := range c.servers {
		m := map[string]string{}
		for _, k := range s.Keys() {
			m[k], _ = s.Get(k)
		}
		out = append(out, m)
	}
	return out
}
