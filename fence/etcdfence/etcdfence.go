// Package etcdfence mints fencing tokens in etcd: [Minter] takes each token
// from the revision of a Put to the key fence:<resource>. etcd orders every
// write of a cluster in one Raft log, so a revision is never handed out
// twice, grows with every write, and survives the loss of a minority of the
// members. It is a Go module of its own, so that only programs that import
// it link the etcd client. docs/fencing.md, "A fence from etcd", says why a
// revision and not a counter key.
package etcdfence

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"quorumlock.dev/fence"
	"quorumlock.dev/internal/names"
	"quorumlock.dev/internal/nilcheck"
)

// KV is the part of an etcd client that a [Minter] needs. *clientv3.Client
// satisfies it, and so does any clientv3.KV, such as a namespaced one
// (namespace.NewKV) that keeps the fence keys under a prefix.
type KV interface {
	Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error)
}

var (
	_ KV = (*clientv3.Client)(nil)
	_ KV = clientv3.KV(nil)
)

// DefaultTimeout bounds one [Minter.Mint] when the caller's context has no
// earlier deadline. It leaves room for a leader election at etcd's default
// election timeout (1 s), so that the loss of the leader delays a mint
// rather than failing it.
const DefaultTimeout = 5 * time.Second

// attemptTimeout bounds one Put within a mint. A Put that a follower
// forwarded to a leader that then died is lost, and etcd answers it only
// after its request timeout (5 s plus two election timeouts); sent again, it
// reaches the new leader. A healthy Put takes milliseconds.
const attemptTimeout = time.Second

// retryPause is the wait before a Put that etcd answered with Unavailable
// (no leader, a member stopping, a connection lost) is sent again.
const retryPause = 20 * time.Millisecond

// Minter mints fencing tokens from etcd revisions. It is safe for
// concurrent use.
//
// It remembers the largest revision it minted, for every resource at once
// since revisions are cluster-wide: a Put answered at or below it means the
// cluster went back (restored from a backup without a revision bump, or
// another cluster behind the same endpoints), and the Minter then refuses
// every mint with [fence.ErrCounterRegressed].
type Minter struct {
	kv      KV
	timeout time.Duration

	minted    atomic.Int64 // the largest revision minted
	regressed atomic.Bool
}

var _ fence.Minter = (*Minter)(nil)

// Option configures a [Minter].
type Option func(*Minter)

// WithTimeout bounds each mint, its retries included (default
// [DefaultTimeout]); a context with an earlier deadline ends it sooner.
func WithTimeout(d time.Duration) Option {
	return func(m *Minter) { m.timeout = d }
}

// New returns a Minter that puts the fence keys through kv. It does no I/O.
// A nil kv or a timeout that is not positive gives [fence.ErrInvalidArgument].
func New(kv KV, opts ...Option) (*Minter, error) {
	if nilcheck.Is(kv) {
		return nil, fmt.Errorf("%w: nil etcd KV", fence.ErrInvalidArgument)
	}
	m := &Minter{kv: kv, timeout: DefaultTimeout}
	for _, opt := range opts {
		opt(m)
	}
	if m.timeout <= 0 {
		return nil, fmt.Errorf("%w: timeout %v is not positive", fence.ErrInvalidArgument, m.timeout)
	}
	return m, nil
}

// Mint puts an empty value to fence:<resource> and returns the revision of
// that Put: more than every fence minted before it, for any resource, by any
// process on the cluster. A member that has no leader refuses the Put at
// once (clientv3.WithRequireLeader). A Put refused as Unavailable or
// Unknown (a member stopping), or not answered within a second, is sent
// again, until ctx or the Minter's timeout ends. A Put whose answer was
// lost may still be applied: that leaves a gap, never a repeat.
func (m *Minter) Mint(ctx context.Context, resource string) (uint64, error) {
	if err := names.Resource(resource); err != nil {
		return 0, fmt.Errorf("%w: %w", fence.ErrInvalidArgument, err)
	}
	key := fence.Key(resource)
	// Read before the Put is sent: only revisions minted before it bind its
	// answer. A concurrent Mint may be answered later with a smaller one.
	floor := m.minted.Load()
	if m.regressed.Load() {
		return 0, m.refused(key, floor)
	}
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	rev, err := m.put(clientv3.WithRequireLeader(ctx), key)
	switch {
	case err != nil:
		return 0, fmt.Errorf("fence: mint %s: %w", key, err)
	case rev <= 0:
		return 0, fmt.Errorf("%w: %s: etcd answered revision %d", fence.ErrCounter, key, rev)
	case rev <= floor:
		m.regressed.Store(true)
		return 0, fmt.Errorf("%w: %s got revision %d, after this Minter had minted %d; it mints no more", fence.ErrCounterRegressed, key, rev, floor)
	}
	if m.regressed.Load() {
		// A concurrent Mint saw the regression while this one was in flight.
		return 0, m.refused(key, floor)
	}
	for {
		old := m.minted.Load()
		if rev <= old || m.minted.CompareAndSwap(old, rev) {
			return uint64(rev), nil
		}
	}
}

func (m *Minter) refused(key string, minted int64) error {
	return fmt.Errorf("%w: %s: etcd went back below revision %d, which this Minter had minted; it mints no more", fence.ErrCounterRegressed, key, minted)
}

// put sends the Put until it is answered, refused for good, or ctx ends.
func (m *Minter) put(ctx context.Context, key string) (int64, error) {
	var last error
	for {
		rev, err := m.attempt(ctx, key)
		switch {
		case err == nil:
			return rev, nil
		case ctx.Err() != nil && last != nil:
			return 0, fmt.Errorf("%w; before that: %w", ctx.Err(), last)
		case ctx.Err() != nil:
			return 0, err
		case !again(err):
			return 0, err
		}
		last = err
		t := time.NewTimer(retryPause)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, fmt.Errorf("%w; before that: %w", ctx.Err(), last)
		case <-t.C:
		}
	}
}

// errAttempt reports a Put that got no answer within attemptTimeout.
var errAttempt = errors.New("no answer within " + attemptTimeout.String())

func (m *Minter) attempt(ctx context.Context, key string) (int64, error) {
	actx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	resp, err := m.kv.Put(actx, key, "")
	switch {
	case err != nil && ctx.Err() == nil && actx.Err() != nil:
		return 0, errAttempt
	case err != nil:
		return 0, err
	case resp.Header == nil:
		return 0, fmt.Errorf("%w: etcd answered without a header", fence.ErrCounter)
	}
	return resp.Header.Revision, nil
}

// again reports an error after which the Put may be sent again: no answer
// in time; etcd or gRPC said Unavailable (no leader, leader changed, a
// member stopping, a lost connection); or a member answered Unknown, as it
// does for the errors of its Raft node ("raft: stopped" while it shuts
// down, "raft proposal dropped" while it has no leader). Such a Put may
// still have been applied; sending it again costs a revision, not a repeat.
func again(err error) bool {
	if errors.Is(err, errAttempt) {
		return true
	}
	var e rpctypes.EtcdError
	if errors.As(err, &e) {
		return e.Code() == codes.Unavailable
	}
	s, ok := status.FromError(err)
	return ok && (s.Code() == codes.Unavailable || s.Code() == codes.Unknown)
}
