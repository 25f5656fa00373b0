package leadership

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"

	"quorumlock.dev/driver"
	"quorumlock.dev/internal/seam"
	"quorumlock.dev/redlock"
)

// The errors of this package. Test for them with errors.Is; errors of the
// lock (redlock.ErrLockLost, redlock.ErrFenceUnavailable, ...) come wrapped
// beside them.
var (
	// ErrInvalidArgument: a nil client, a bad role or option.
	ErrInvalidArgument = errors.New("leadership: invalid argument")
	// ErrNoFence: the lock was won without a fence (a client built without
	// redlock.WithFence); it was released, since a term without a fence is
	// not a term.
	ErrNoFence = errors.New("leadership: the lock carries no fence")
	// ErrResigned is the cause of a term's context after [Term.Resign].
	ErrResigned = errors.New("leadership: resigned")
	// ErrUnhealthy: the health check of [WithHealth] failed, which ended
	// the term; the cause of its context wraps it and the check's error.
	ErrUnhealthy = errors.New("leadership: health check failed")
	// ErrNoLeader: no identity record matches the lock's holder on a
	// majority of masters: nobody leads, a term is starting, or too many
	// masters did not answer.
	ErrNoLeader = errors.New("leadership: no leader")
)

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}

// Defaults of the options.
const (
	defaultTTL     = 10 * time.Second
	defaultObserve = time.Second
	// maxRoleLen keeps the lock's resource, leader:{role}, within redlock's
	// 512 bytes.
	maxRoleLen = 500
	// noMaxTerm stands for "no cap" in Lock.Renew's max hold: 100 years.
	noMaxTerm = 100 * 365 * 24 * time.Hour
)

// Option configures an Election; see [New].
type Option func(*config)

type config struct {
	ttl          time.Duration
	maxTerm      time.Duration
	identity     string
	identitySet  bool
	health       func(ctx context.Context) error
	healthSet    bool
	nodeTimeout  time.Duration // the client's
	observeEvery time.Duration
	hooks        Hooks
}

// WithTTL sets the TTL of the lock behind a term (default 10 s): the
// longest a dead leader keeps its role. It must be at least 10 of the
// client's node timeouts, so that renewal has time to act before the lease
// ends.
func WithTTL(ttl time.Duration) Option { return func(c *config) { c.ttl = ttl } }

// WithMaxTerm ends every term after at most d (0, the default: no cap),
// handing the role on: a way to rotate leaders.
func WithMaxTerm(d time.Duration) Option {
	return func(c *config) { c.maxTerm = d }
}

// WithIdentity sets the value that [Election.Leader] reports while this
// candidate leads (default hostname:pid). It must not be empty.
func WithIdentity(id string) Option {
	return func(c *config) { c.identity, c.identitySet = id, true }
}

// WithHealth makes the term call check every fifth of the TTL: a nil error
// counts as progress ([Term.Progress]), an error ends the term at once with
// a cause wrapping [ErrUnhealthy]. Each call gets a context that ends after
// that interval, and must return when it ends. Without it, the leader must
// call Term.Progress itself.
func WithHealth(check func(ctx context.Context) error) Option {
	return func(c *config) { c.health, c.healthSet = check, true }
}

// WithObserveInterval sets how often [Election.Observe] reads who leads when
// no change was pushed to it (default 1 s).
func WithObserveInterval(d time.Duration) Option {
	return func(c *config) { c.observeEvery = d }
}

// WithHooks sets who is told of terms (see [Hooks]).
func WithHooks(h Hooks) Option { return func(c *config) { c.hooks = h } }

// Hooks are told of terms, for metrics and logs. Each is optional (nil is
// off). They are called from Campaign and the term's goroutine: they must be
// safe for concurrent use and return quickly. A role is a label the user chose, so
// a gauge of leaders per role stays bounded.
type Hooks struct {
	// TermStarted: this candidate was elected for role with fence.
	TermStarted func(role string, fence uint64)
	// RenewalFailed: a term of role ended for another reason than Resign
	// (no progress, a failed health check or extension, the lease ran out);
	// reason is the cause of its context. TermEnded follows.
	RenewalFailed func(role string, reason error)
	// TermEnded: the term of role with fence ended, before its lock is
	// released; cause is the cause of its context ([ErrResigned] after
	// Resign). redlockprom.Leaders gauges terms with these two hooks.
	TermEnded func(role string, fence uint64, cause error)
}

// Election is a candidate for one role, and a reader of who holds it. It is
// safe for concurrent use; it starts no goroutine but a term's and an
// Observe's, each ended with them.
type Election struct {
	c       *redlock.Client
	masters []driver.Conn
	role    string
	cfg     config
	// The keys, all with the hash tag {role} so that one script may read
	// two of them on a Redis Cluster master.
	resource  string // leader:{role}: the lock is lock:leader:{role}, its fence fence:leader:{role}
	lockKey   string
	recordKey string // leader:{role}: who leads, written by the leader where it holds the lock
}

// New returns a candidate for role that campaigns with c, whose lock must
// carry a fence (redlock.WithFence), and publishes its identity on c's
// masters, each call bounded by c's node timeout. A nil client, an empty
// role, a role with braces or control characters, or a bad option are
// ErrInvalidArgument.
func New(c *redlock.Client, role string, opts ...Option) (*Election, error) {
	masters, nodeTimeout := seam.ClientMasters(c)
	cfg := config{ttl: defaultTTL, nodeTimeout: nodeTimeout, observeEvery: defaultObserve}
	for _, o := range opts {
		if o == nil {
			return nil, invalid("a nil Option")
		}
		o(&cfg)
	}
	if err := validate(c, role, &cfg); err != nil {
		return nil, err
	}
	if !cfg.identitySet {
		host, _ := os.Hostname()
		cfg.identity = host + ":" + strconv.Itoa(os.Getpid())
	}
	return newElection(c, masters, role, cfg), nil
}

// newElection names role's keys; c, role and cfg are valid.
func newElection(c *redlock.Client, masters []driver.Conn, role string, cfg config) *Election {
	resource := "leader:{" + role + "}"
	return &Election{
		c:         c,
		masters:   masters,
		role:      role,
		cfg:       cfg,
		resource:  resource,
		lockKey:   "lock:" + resource,
		recordKey: resource,
	}
}

func validRole(role string) error {
	switch {
	case role == "":
		return invalid("an empty role")
	case len(role) > maxRoleLen:
		return invalid("a role of %d bytes (at most %d)", len(role), maxRoleLen)
	case strings.ContainsAny(role, "{}"):
		return invalid("role %q holds a brace: the package sets the hash tag itself", role)
	case strings.ContainsFunc(role, unicode.IsControl):
		return invalid("role %q holds a control character", role)
	}
	return nil
}

func validate(c *redlock.Client, role string, cfg *config) error {
	if c == nil {
		return invalid("a nil *redlock.Client")
	}
	if err := validRole(role); err != nil {
		return err
	}
	switch {
	case cfg.identitySet && cfg.identity == "":
		return invalid("an empty identity")
	case cfg.healthSet && cfg.health == nil:
		return invalid("a nil health check")
	case cfg.maxTerm < 0:
		return invalid("max term %v is negative", cfg.maxTerm)
	case cfg.ttl < 10*cfg.nodeTimeout:
		return invalid("ttl %v is less than 10 of the client's node timeouts (%v)", cfg.ttl, 10*cfg.nodeTimeout)
	case cfg.observeEvery <= 0:
		return invalid("observe interval %v is not positive", cfg.observeEvery)
	}
	return nil
}

// Role is the role the election is for.
func (e *Election) Role() string { return e.role }

// Campaign waits until this candidate leads the role, or ctx ends, and
// returns the term. A release of the lock by the leader wakes it at once;
// otherwise it wins when the leader's lease ends. The term does not end
// with ctx: end it with [Term.Resign]. Campaign never returns a term that
// has already ended: when the lock's lease ran out while the term was
// being set up (the process paused between publishing the identity and
// reading the replies, say), it releases what it holds and campaigns
// again. Errors: the lock's (joined with ctx.Err() when ctx ended the
// wait), [ErrNoFence], or a failure to start renewal or to publish the
// identity, after which the lock was released.
func (e *Election) Campaign(ctx context.Context) (*Term, error) {
	for {
		t, err := e.campaign(ctx)
		if err != nil || t != nil {
			return t, err
		}
	}
}

// campaign is one election of Campaign's: nil and no error when the term
// it won ended before it could start.
func (e *Election) campaign(ctx context.Context) (*Term, error) {
	lk, err := e.c.Lock(ctx, e.resource, e.cfg.ttl)
	if err != nil {
		return nil, fmt.Errorf("leadership: campaign for %q: %w", e.role, err)
	}
	fence, ok := lk.Fence()
	if !ok {
		_ = lk.Unlock(context.Background())
		return nil, fmt.Errorf("%w: campaign for %q: build the client with redlock.WithFence", ErrNoFence, e.role)
	}
	maxTerm := e.cfg.maxTerm
	if maxTerm == 0 {
		maxTerm = noMaxTerm
	}
	if err := lk.Renew(e.cfg.ttl, maxTerm); err != nil {
		_ = lk.Unlock(context.Background())
		return nil, fmt.Errorf("leadership: campaign for %q: %w", e.role, err)
	}
	t := newTerm(e, lk, fence)
	if err := e.publish(ctx, lk.Token(), t.record); err != nil {
		t.cancel(err)
		_ = lk.Unlock(context.Background())
		return nil, fmt.Errorf("leadership: campaign for %q: publishing the identity: %w", e.role, err)
	}
	if t.ctx.Err() != nil {
		// Over before it began: another candidate may lead already.
		t.cancel(nil)
		e.withdraw(t.record)
		_ = lk.Unlock(context.Background())
		return nil, nil
	}
	t.start()
	return t, nil
}

// quorum is how many masters make a majority.
func (e *Election) quorum() int { return len(e.masters)/2 + 1 }

// Info is who leads a role: the identity of the leader and its term's fence.
type Info struct {
	Identity string
	Fence    uint64
}

// Leader returns who leads the role now: the identity record that a
// majority of masters hold beside the lock's current token. Each call is
// bounded by the node timeout. Nobody leading, a term that is starting or
// too few answers give an error wrapping [ErrNoLeader] (with the masters'
// errors). Like any read, it can be stale by the time it returns.
func (e *Election) Leader(ctx context.Context) (Info, error) {
	replies := e.fanOut(ctx, readScript, []string{e.lockKey, e.recordKey})
	votes := make(map[string]int)
	var errs []error
	for i, r := range replies {
		if r.err != nil {
			errs = append(errs, fmt.Errorf("master %d: %w", i, r.err))
			continue
		}
		pair, ok := r.reply.([]any)
		if !ok || len(pair) != 2 {
			errs = append(errs, fmt.Errorf("master %d: %w", i, driver.ErrUnexpectedReply))
			continue
		}
		token, _ := pair[0].(string)
		record, _ := pair[1].(string)
		if token == "" || record == "" {
			continue
		}
		if rec, ok := parseRecord(record); ok && rec.token == token {
			votes[record]++
		}
	}
	for record, n := range votes {
		if n >= e.quorum() {
			rec, _ := parseRecord(record)
			return Info{Identity: rec.identity, Fence: rec.fence}, nil
		}
	}
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	return Info{}, errors.Join(append([]error{fmt.Errorf("%w for %q", ErrNoLeader, e.role)}, errs...)...)
}

// publish writes the identity record on the masters where token holds the
// lock, and wants a majority of them. A master that did not store it is
// asked once more a node timeout later, in the background: the lock's
// round returned at a majority, and its call to that master may still be
// on its way (the record went there before the key did, and a term's
// record then lived on a bare majority, one lost master from no leader).
// A retry that comes after the term ended stores nothing (the key is no
// longer the token's) or a record that no longer counts (readers check it
// against the key).
func (e *Election) publish(ctx context.Context, token, record string) error {
	keys := []string{e.lockKey, e.recordKey}
	replies := e.fanOut(ctx, publishScript, keys, token, record)
	n := 0
	var errs []error
	for i, r := range replies {
		switch {
		case r.err != nil:
			errs = append(errs, fmt.Errorf("master %d: %w", i, r.err))
		case r.reply == int64(1):
			n++
		}
	}
	if n >= e.quorum() {
		for i, r := range replies {
			if r.err == nil && r.reply == int64(1) {
				continue
			}
			time.AfterFunc(e.cfg.nodeTimeout, func() {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.nodeTimeout)
				defer cancel()
				_, _ = e.masters[i].Eval(cctx, publishScript, keys, token, record)
			})
		}
		return nil
	}
	return errors.Join(append([]error{fmt.Errorf("stored on %d of %d masters", n, len(e.masters))}, errs...)...)
}

// withdraw deletes the identity record where it is still ours. Failures
// are left: Leader checks the record against the lock's token.
func (e *Election) withdraw(record string) {
	e.fanOut(context.Background(), withdrawScript, []string{e.recordKey}, record)
}

type reply struct {
	reply any
	err   error
}

// fanOut runs script on every master at once, each call bounded by the
// node timeout, and returns when all have answered or timed out.
func (e *Election) fanOut(ctx context.Context, script *driver.Script, keys []string, args ...any) []reply {
	replies := make([]reply, len(e.masters))
	done := make(chan struct{}, len(e.masters))
	for i, m := range e.masters {
		go func() {
			cctx, cancel := context.WithTimeout(ctx, e.cfg.nodeTimeout)
			defer cancel()
			r, err := m.Eval(cctx, script, keys, args...)
			replies[i] = reply{r, err}
			done <- struct{}{}
		}()
	}
	for range e.masters {
		<-done
	}
	return replies
}
