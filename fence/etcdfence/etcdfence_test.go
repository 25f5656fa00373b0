package etcdfence_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"quorumlock.dev/fence"
	"quorumlock.dev/fence/etcdfence"
	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
	"quorumlock.dev/redlock"

	"quorumlock.dev/driver"

	"quorumlock.dev/driver/goredis"
)

var zapNop = zap.NewNop()

// mint is one Mint as the caller saw it.
type mint struct {
	worker     int
	resource   string
	start, end time.Time
	v          uint64
	took       time.Duration
}

// history collects mints from several goroutines.
type history struct {
	mu    sync.Mutex
	mints []mint
	errs  []error
}

func (h *history) mint(ctx context.Context, m *etcdfence.Minter, worker int, resource string) error {
	start := time.Now()
	v, err := m.Mint(ctx, resource)
	end := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		h.errs = append(h.errs, err)
		return err
	}
	h.mints = append(h.mints, mint{worker: worker, resource: resource, start: start, end: end, v: v, took: end.Sub(start)})
	return nil
}

// checkOrder fails t unless the fences are all different and every fence
// is larger than each one whose Mint had returned before its own Mint
// started: what a stale holder's storage relies on, whichever process or
// member minted each.
func checkOrder(t *testing.T, mints []mint) {
	t.Helper()
	require.NotEmpty(t, mints)
	seen := make(map[uint64]int, len(mints))
	for _, m := range mints {
		if w, dup := seen[m.v]; dup {
			t.Fatalf("fence %d minted twice (workers %d and %d)", m.v, w, m.worker)
		}
		seen[m.v] = m.worker
	}
	byStart := slices.SortedFunc(slices.Values(mints), func(a, b mint) int { return a.start.Compare(b.start) })
	byEnd := slices.SortedFunc(slices.Values(mints), func(a, b mint) int { return a.end.Compare(b.end) })
	var done int
	var largest mint // the largest fence among the mints that returned before
	for _, m := range byStart {
		for ; done < len(byEnd) && byEnd[done].end.Before(m.start); done++ {
			if byEnd[done].v > largest.v {
				largest = byEnd[done]
			}
		}
		if m.v <= largest.v {
			t.Fatalf("fence %d (worker %d) started after fence %d (worker %d) was returned, and is not larger", m.v, m.worker, largest.v, largest.worker)
		}
	}
}

func newMinter(t *testing.T, kv etcdfence.KV, opts ...etcdfence.Option) *etcdfence.Minter {
	t.Helper()
	m, err := etcdfence.New(kv, opts...)
	require.NoError(t, err)
	return m
}

// TestMintOrderedAcrossMembers: two Minters, each with a client on a
// different member, mint from four goroutines each, on two resources. No
// fence repeats, each is larger than every fence returned before its Mint
// began, and the fence key's last modification is the largest fence of its
// resource: the token is the Put's revision.
func TestMintOrderedAcrossMembers(t *testing.T) {
	c := startCluster(t, 3)
	minters := []*etcdfence.Minter{
		newMinter(t, c.client(c.members[0])),
		newMinter(t, c.client(c.members[1])),
	}
	resources := []string{"alloc:WH-01", "alloc:WH-02"}
	var h history
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 25 {
				if h.mint(t.Context(), minters[w%2], w, resources[(w+i)%2]) != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	require.Empty(t, h.errs)
	require.Len(t, h.mints, 200)
	checkOrder(t, h.mints)

	largest := map[string]uint64{}
	for _, m := range h.mints {
		largest[m.resource] = max(largest[m.resource], m.v)
	}
	for _, r := range resources {
		resp, err := c.client().Get(t.Context(), fence.Key(r))
		require.NoError(t, err)
		require.Len(t, resp.Kvs, 1)
		assert.Equal(t, largest[r], uint64(resp.Kvs[0].ModRevision), "the largest fence of %s is its key's last Put", r)
	}
}

// TestMintSurvivesMinorityLoss: goroutines mint through two Minters whose
// clients know every member; the leader, or a follower, is killed mid-run.
// Every mint succeeds, each worker mints again after the kill, and the
// whole sequence has no repeat and never goes back.
func TestMintSurvivesMinorityLoss(t *testing.T) {
	for _, victim := range []string{"leader", "follower"} {
		t.Run(victim, func(t *testing.T) {
			c := startCluster(t, 3)
			minters := []*etcdfence.Minter{newMinter(t, c.client()), newMinter(t, c.client())}
			const workers, before, after = 6, 10, 15
			ctx, cancel := context.WithTimeout(t.Context(), 2*readyWithin)
			defer cancel()
			var h history
			var ready sync.WaitGroup
			ready.Add(workers)
			killed := make(chan struct{})
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					var once sync.Once
					defer once.Do(ready.Done)
					for i, since := 0, 0; since < after; i++ {
						if h.mint(ctx, minters[w%2], w, fmt.Sprintf("alloc:WH-%02d", w%3)) != nil {
							return
						}
						if i == before-1 {
							once.Do(ready.Done)
						}
						select {
						case <-killed:
							since++
						default:
						}
					}
				})
			}
			ready.Wait()
			dead := c.leader()
			if victim == "follower" {
				dead = c.members[(slices.Index(c.members, dead)+1)%len(c.members)]
			}
			dead.kill()
			close(killed)
			wg.Wait()
			require.Empty(t, h.errs, "a minority lost must not fail a mint")
			require.GreaterOrEqual(t, len(h.mints), workers*(before+after))
			checkOrder(t, h.mints)
			var slowest time.Duration
			for _, m := range h.mints {
				slowest = max(slowest, m.took)
			}
			t.Logf("killed %s %s; %d mints, slowest %v", victim, dead.name, len(h.mints), slowest)
		})
	}
}

// TestMintFailsWithoutQuorum: with two of three members killed, Mint
// returns no fence and an error wrapping context.DeadlineExceeded, within
// the caller's deadline or the Minter's timeout, whichever comes first.
func TestMintFailsWithoutQuorum(t *testing.T) {
	c := startCluster(t, 3)
	const timeout = 1500 * time.Millisecond
	m := newMinter(t, c.client(), etcdfence.WithTimeout(timeout))
	_, err := m.Mint(t.Context(), "alloc:WH-01")
	require.NoError(t, err)
	c.members[0].kill()
	c.members[1].kill()
	for _, tc := range []struct {
		name     string
		deadline time.Duration // 0: none
		bound    time.Duration
		noLeader bool // the lone member has had time to see that it has no leader
	}{
		{"caller's deadline", 400 * time.Millisecond, 400 * time.Millisecond, false},
		{"Minter's timeout", 0, timeout, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			if tc.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.deadline)
				defer cancel()
			}
			start := time.Now()
			v, err := m.Mint(ctx, "alloc:WH-01")
			took := time.Since(start)
			assert.Zero(t, v)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			if tc.noLeader {
				// It refused the Puts (clientv3.WithRequireLeader) rather than
				// holding them, so that a client could have tried another member.
				assert.ErrorIs(t, err, rpctypes.ErrNoLeader)
			}
			assert.GreaterOrEqual(t, took, tc.bound-10*time.Millisecond)
			// Room for a loaded machine, far below what etcd's own request
			// timeout (5 s and two election timeouts) would take.
			assert.Less(t, took, tc.bound+time.Second, "Mint must end at its bound")
			t.Logf("no quorum: %v after %v", err, took)
		})
	}
}

// fakeKV answers Puts with the revisions it is given, one per Put.
type fakeKV struct {
	revs  []int64
	puts  atomic.Int64
	reply func(int) (*clientv3.PutResponse, error)
}

func (f *fakeKV) Put(ctx context.Context, key, val string, _ ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	n := int(f.puts.Add(1)) - 1
	if f.reply != nil {
		return f.reply(n)
	}
	resp := new(clientv3.PutResponse)
	resp.Header = new(etcdserverpb.ResponseHeader)
	resp.Header.Revision = f.revs[n]
	return resp, nil
}

// TestMintRefusesRegression: a revision at or below one already minted (a
// cluster restored from a backup without a revision bump) gives
// fence.ErrCounterRegressed, and the Minter mints nothing after it, even
// when the revisions climb past the mark again.
func TestMintRefusesRegression(t *testing.T) {
	for _, back := range []int64{100, 50} {
		t.Run(fmt.Sprint(back), func(t *testing.T) {
			kv := &fakeKV{revs: []int64{99, 100, back, 500}}
			m := newMinter(t, kv)
			for _, want := range []uint64{99, 100} {
				v, err := m.Mint(t.Context(), "alloc:WH-01")
				require.NoError(t, err)
				assert.Equal(t, want, v)
			}
			_, err := m.Mint(t.Context(), "alloc:WH-02")
			require.ErrorIs(t, err, fence.ErrCounterRegressed)
			_, err = m.Mint(t.Context(), "alloc:WH-01")
			require.ErrorIs(t, err, fence.ErrCounterRegressed)
			assert.Equal(t, int64(3), kv.puts.Load(), "a Minter that saw a regression sends no more Puts")
		})
	}
}

// TestMintBadAnswers: a revision that is no token, and an error etcd will
// not get over, end the mint at once with no fence.
func TestMintBadAnswers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply func(int) (*clientv3.PutResponse, error)
		want  error
	}{
		{"zero revision", func(int) (*clientv3.PutResponse, error) {
			return &clientv3.PutResponse{Header: &etcdserverpb.ResponseHeader{}}, nil
		}, fence.ErrCounter},
		{"no header", func(int) (*clientv3.PutResponse, error) { return &clientv3.PutResponse{}, nil }, fence.ErrCounter},
		{"permission denied", func(int) (*clientv3.PutResponse, error) { return nil, rpctypes.ErrPermissionDenied }, rpctypes.ErrPermissionDenied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv := &fakeKV{reply: tc.reply}
			v, err := newMinter(t, kv).Mint(t.Context(), "alloc:WH-01")
			assert.Zero(t, v)
			require.ErrorIs(t, err, tc.want)
			assert.Equal(t, int64(1), kv.puts.Load(), "sent once, not retried")
		})
	}
}

// TestMintRetries: a Put refused as Unavailable (no leader) or Unknown (a
// member whose Raft node stopped) is sent again, and the mint succeeds with
// the revision of the Put that was answered.
func TestMintRetries(t *testing.T) {
	for name, refusal := range map[string]error{
		"no leader":    rpctypes.ErrNoLeader,
		"raft stopped": status.Error(codes.Unknown, "raft: stopped"),
	} {
		t.Run(name, func(t *testing.T) {
			kv := &fakeKV{reply: func(n int) (*clientv3.PutResponse, error) {
				if n < 3 {
					return nil, refusal
				}
				return &clientv3.PutResponse{Header: &etcdserverpb.ResponseHeader{Revision: 7}}, nil
			}}
			v, err := newMinter(t, kv).Mint(t.Context(), "alloc:WH-01")
			require.NoError(t, err)
			assert.Equal(t, uint64(7), v)
			assert.Equal(t, int64(4), kv.puts.Load())
		})
	}
}

func TestBadInput(t *testing.T) {
	var nilClient *clientv3.Client
	for name, kv := range map[string]etcdfence.KV{"nil": nil, "typed nil": nilClient} {
		_, err := etcdfence.New(kv)
		assert.ErrorIs(t, err, fence.ErrInvalidArgument, name)
	}
	for _, d := range []time.Duration{0, -time.Second} {
		_, err := etcdfence.New(&fakeKV{}, etcdfence.WithTimeout(d))
		assert.ErrorIs(t, err, fence.ErrInvalidArgument, "timeout %v", d)
	}
	kv := &fakeKV{revs: []int64{1}}
	v, err := newMinter(t, kv).Mint(t.Context(), "")
	assert.Zero(t, v)
	require.ErrorIs(t, err, fence.ErrInvalidArgument)
	assert.Zero(t, kv.puts.Load(), "no Put for an empty resource")
	for _, bad := range []string{"a\nb", "nul\x00", strings.Repeat("x", 1<<20)} {
		_, err := newMinter(t, kv).Mint(t.Context(), bad)
		require.ErrorIs(t, err, fence.ErrInvalidArgument)
		assert.Less(t, len(err.Error()), 200, "the error quotes the whole name")
	}
	assert.Zero(t, kv.puts.Load(), "a Put for a bad name")
}

// TestLockWithoutFenceQuorum: a redlock client whose fence comes from etcd
// gets locks with fences while etcd has a quorum. With two of three members
// killed, TryLock returns redlock.ErrFenceUnavailable and no lock, within
// the lock's validity, and the lock's key is left on no master.
func TestLockWithoutFenceQuorum(t *testing.T) {
	c := startCluster(t, 3)
	servers := redistest.StartN(t, 3, redisserver.Options{})
	masters := make([]driver.Conn, len(servers))
	for i, s := range servers {
		masters[i] = goredis.Conn(redistest.Client(t, s.Addr()))
	}
	// A node timeout with room for a loaded machine under -race: the quorum
	// must be won for the mint to be tried at all.
	client, err := redlock.New(masters, redlock.WithFence(newMinter(t, c.client())), redlock.WithNodeTimeout(250*time.Millisecond))
	require.NoError(t, err)
	ctx := t.Context()
	const res = "alloc:WH-01"

	var last uint64
	for range 3 {
		l, err := client.TryLock(ctx, res, 2*time.Second)
		require.NoError(t, err)
		f, ok := l.Fence()
		require.True(t, ok)
		assert.Greater(t, f, last)
		last = f
		require.NoError(t, l.Unlock(ctx))
	}

	c.members[0].kill()
	c.members[2].kill()
	const ttl = time.Second
	start := time.Now()
	l, err := client.TryLock(ctx, res, ttl)
	took := time.Since(start)
	assert.Nil(t, l)
	require.ErrorIs(t, err, redlock.ErrFenceUnavailable)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, took, ttl+time.Second, "the mint must end with the lock's validity")
	for _, m := range masters {
		n, err := goredis.Unwrap(m).(*redis.Client).Exists(ctx, "lock:"+res).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "a lock whose fence failed must be released")
	}
	t.Logf("etcd without quorum: TryLock failed after %v: %v", took, err)
}
