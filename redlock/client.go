package redlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"quorumlock.dev/clockdrift"
	"quorumlock.dev/driver"
	"quorumlock.dev/internal/bugs"
	"quorumlock.dev/internal/names"
	"quorumlock.dev/internal/nilcheck"
	"quorumlock.dev/internal/seam"
	"quorumlock.dev/quorum"
	"quorumlock.dev/redlock/internal/fair"
	"quorumlock.dev/redlock/internal/plain"
	"quorumlock.dev/redlock/internal/push"
	"quorumlock.dev/redlock/internal/retry"
	"quorumlock.dev/redlock/internal/wait"
	"quorumlock.dev/redlock/internal/watch"
)

// maxResourceLen is the longest resource name accepted, in bytes.
const maxResourceLen = names.MaxResource

// Client takes locks on a fixed set of masters; it is safe for concurrent use.
// Its goroutines: from New, one per master for its first call (at most 1 s);
// the calls to the masters, each on a goroutine of a pool of which at most
// 4 per master wait between calls;
// with [WithRestartGuard] or [WithClockMonitor], one watcher and at most one
// sample per master; from the first Lock that waits, two per master that can
// subscribe; at most one per master while releases that got no reply are
// tried again; one per renewing Lock ([Lock.Renew]). [Client.Close] ends all
// but the renewers.
type Client struct {
	masters []driver.Conn
	addrs   []string // for errors and logs
	// host:port of a master whose client dials one server, for the dial
	// that diagnoses a master that does not answer; "" for others.
	dialAddrs []string
	noRetry   []bool // the master's client never retries a command
	health    []health
	epoch     time.Time // origin of nanos
	clock     clock
	watcher   *watch.Watcher // the restart guard and the clock monitor; nil when neither is on
	quorum    int
	group     quorum.Group // every round: all masters, a majority, the node timeout
	cfg       config
	push      *push.Hub          // subscriptions for waiters, made at the first wait
	cluster   bool               // some master spreads keys by hash slot: LockAll needs one hash tag
	policy    wait.Policy[*Lock] // how a Lock call waits (wait.go): plain, or fair
	retries   *retry.Queue       // releases that got no reply, tried again (cleanup.go)
	flights   flights            // TryLock attempts in flight, by resource (split.go)
	warm      warmup             // the first call to each master (warm.go)
}

// New returns a client over masters, one per independent Redis master adapted to
// the driver seam (go-redis: goredis.Masters(c1, c2, c3)); one master is the
// single-instance mode. Bad options, no masters, a nil or repeated master, or one
// that moves keys between servers (a *redis.Ring) are [ErrInvalidArgument]. New
// returns at once; in the background it sends each master a first call that
// opens a connection (acquisitions wait for a majority of them, at most 1 s)
// and starts the watcher, which samples at once (see [Client]).
func New(masters []driver.Conn, opts ...Option) (*Client, error) {
	cfg := defaults()
	for _, opt := range opts {
		if opt == nil {
			return nil, invalid("nil option")
		}
		opt(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if len(masters) == 0 {
		return nil, invalid("no masters")
	}
	c := &Client{
		masters:   append([]driver.Conn(nil), masters...),
		addrs:     make([]string, len(masters)),
		dialAddrs: make([]string, len(masters)),
		noRetry:   make([]bool, len(masters)),
		health:    make([]health, len(masters)),
		epoch:     time.Now(),
		clock:     systemClock{},
		quorum:    quorum.Majority(len(masters)),
		group: quorum.Group{Nodes: len(masters), Need: quorum.Majority(len(masters)), Timeout: cfg.nodeTimeout,
			Pool: quorum.NewPool(idlePerMaster * len(masters))},
		cfg: cfg,
	}
	tag := fmt.Sprintf("%08x", wait.RandUint32(c.stream()))
	wall := wallMicros
	if cfg.seamClock != nil {
		c.clock = seamClock{cfg.seamClock}
		if w, ok := cfg.seamClock.(seam.WallClock); ok {
			wall = func() int64 { return w.Wall().UnixMicro() }
		}
	}
	c.retries = c.newRetries()
	c.policy = plain.New[*Lock](policyCore{c})
	if cfg.fairTTL > 0 {
		c.policy = fair.New[*Lock](policyCore{c}, fair.Config{Entry: cfg.fairTTL, Tag: tag, Wall: wall, Errors: fair.Errors{
			NotAcquired: ErrNotAcquired, LockNotHeld: ErrLockNotHeld, QuorumUnavailable: ErrQuorumUnavailable, Quarantined: errQuarantined,
		}})
	}
	c.push = push.NewHub(c.masters, c.addrs, cfg.logger)
	if err := c.describe(masters); err != nil {
		return nil, err
	}
	if err := c.checkFenceNode(); err != nil {
		return nil, err
	}
	if cfg.guardInterval > 0 {
		c.watcher = c.startWatcher()
	}
	c.startWarmup()
	return c, nil
}

// describe checks masters and records how each describes itself (the
// label in errors and logs, the address a diagnosis dials, whether its
// client retries, whether it spreads keys by hash slot): a nil master, one
// that is not one failure domain, or two that are one client or one
// server are [ErrInvalidArgument].
func (c *Client) describe(masters []driver.Conn) error {
	seen := make(map[string]int, len(masters))
	for i, m := range masters {
		if nilcheck.Is(m) {
			return invalid("master %d is nil", i)
		}
		d := driver.Describe(m)
		if d.Unsafe != "" {
			return invalid("master %d is not one failure domain: %s", i, d.Unsafe)
		}
		for j := range i {
			if sameClient(masters[j], m) {
				return invalid("masters %d and %d are the same client", j, i)
			}
		}
		addr := d.Label()
		if j, dup := seen[addr]; dup && addr != "" {
			return invalid("masters %d and %d are both %s", j, i, addr)
		}
		if addr != "" {
			seen[addr] = i
		}
		c.addrs[i] = masterLabel(i, addr)
		c.dialAddrs[i] = d.Addr
		c.noRetry[i] = d.NeverRetries
		c.cluster = c.cluster || d.Cluster != nil
	}
	return nil
}

// checkFenceNode refuses a fence counter that lives on one of the masters:
// the counter must survive what the masters may lose.
func (c *Client) checkFenceNode() error {
	on, ok := c.cfg.minter.(nodeMinter)
	if !ok {
		return nil
	}
	node := on.Node()
	addr := driver.Describe(node).Label()
	for i, m := range c.masters {
		if sameClient(m, node) || (addr != "" && addr == c.addrs[i]) {
			return invalid("the fence counter is on master %d (%s); it needs a node of its own", i, c.addrs[i])
		}
	}
	return nil
}

// sameClient reports whether a and b are one client: the same Conn, or
// Conns of the same client.
func sameClient(a, b driver.Conn) bool {
	if same(a, b) {
		return true
	}
	ca, cb := driver.Describe(a).Client, driver.Describe(b).Client
	return ca != nil && same(ca, cb)
}

// same reports whether a and b are one value. Values that cannot be
// compared (a comparable type may hold one in an interface field) are
// never the same.
func same(a, b any) (eq bool) {
	defer func() {
		if recover() != nil {
			eq = false
		}
	}()
	return a == b
}

// Close stops the client's subscriptions and watcher, waits for the calls
// the client still has out (the releases that Unlock did not wait for once
// a majority confirmed, the undo of a lost attempt, a waiter leaving a
// queue), stops the background retries of releases that got no reply (a
// key they had not reached expires by itself) and the goroutines waiting
// for calls, and wakes its waiting Lock calls, which poll at the retry delay
// from then on; the client still locks, counting every master's vote. It
// returns nil once all of that ended, or after one node timeout in all (a
// call stuck on a hung master ends in the background; docs/design.md,
// "Waiting for a held lock"). Close the masters' clients after it, not
// before: a release still out would fail and leave its key for its TTL.
// Idempotent; it releases no lock.
func (c *Client) Close() error {
	by := time.Now().Add(c.cfg.nodeTimeout)
	c.watcher.Close(by)
	c.push.Close(by)
	c.stopWarmup()
	c.group.Pool.Wait(by)
	c.retries.Close(by)
	c.group.Pool.Close()
	return nil
}

// background runs f on a goroutine of the client's pool: Close waits for
// it (a node timeout at most).
func (c *Client) background(f func()) { c.group.Pool.Go(f) }

// idlePerMaster bounds the goroutines per master that the client's pool
// keeps waiting for the next call (quorum.Pool): enough for a few calls in
// flight at once without a new goroutine each.
const idlePerMaster = 4

// TryLock makes one attempt to lock resource for ttl and returns once a
// majority of masters agreed or became impossible, each call bounded by the
// node timeout. An attempt whose votes were split (no token holds a
// majority) is made again after a random delay, at most 5 times, and
// overlapping TryLock calls of one Client on one resource share one attempt
// (docs/design.md, "Crowds"). A lost attempt is released on every master,
// even after ctx ended. Errors: [ErrNotAcquired] (others hold it),
// [ErrQuorumUnavailable] (too many masters failed), [ErrFenceUnavailable],
// joined with per-master errors.
func (c *Client) TryLock(ctx context.Context, resource string, ttl time.Duration) (*Lock, error) {
	if err := c.check(resource, ttl); err != nil {
		return nil, err
	}
	return c.observeAcquire(ctx, resource, nil, func(ctx context.Context) (*Lock, error) {
		if err := ctx.Err(); err != nil {
			return nil, c.notAttempted(ctx, err)
		}
		return c.tryLock(ctx, resource, ttl)
	})
}

// Lock is [Client.TryLock] that waits: for the holder's release or expiry
// after a loss, the retry delay after other failures (docs/design.md, "Waiting
// for a held lock"). It returns when it wins, when [WithRetry]'s attempts are
// spent (no cap by default), or when ctx ends, with the last attempt's error
// joined with ctx.Err(); [fence.ErrCounterRegressed] ends it at once.
func (c *Client) Lock(ctx context.Context, resource string, ttl time.Duration) (*Lock, error) {
	if err := c.check(resource, ttl); err != nil {
		return nil, err
	}
	return c.observeAcquire(ctx, resource, nil, func(ctx context.Context) (*Lock, error) {
		return c.wait(ctx, resource, func() (wait.Waiter[*Lock], error) { return c.policy.Join(ctx, resource, ttl) })
	})
}

func (c *Client) check(resource string, ttl time.Duration) error {
	if err := names.Resource(resource); err != nil {
		return invalid("%v", err)
	}
	if ttl < time.Millisecond {
		return invalid("ttl %v is below 1ms", ttl)
	}
	if lease := c.lease(ttl); lease <= c.cfg.nodeTimeout {
		return invalid("ttl %v leaves %v after the drift allowance, not more than the node timeout %v: an attempt that takes its whole node timeout would have no validity left",
			ttl, lease, c.cfg.nodeTimeout)
	}
	return nil
}

// lease is what a TTL of ttl gives a holder, counted from the start of the
// round that set it: the whole milliseconds Redis keeps, less the drift
// allowance. The one place the formula is written.
func (c *Client) lease(ttl time.Duration) time.Duration {
	ttl = ttl.Truncate(time.Millisecond)
	if bugs.DriftAdded {
		return ttl + clockdrift.Allowance(ttl, c.cfg.driftFactor, c.cfg.driftConstant)
	}
	return ttl - clockdrift.Allowance(ttl, c.cfg.driftFactor, c.cfg.driftConstant)
}

// attempt is one round of the algorithm on resource: SET NX on every
// master, the validity check, the fence. On a loss it also returns the
// round, for the wait that follows.
func (c *Client) attempt(ctx context.Context, resource string, ttl time.Duration) (*Lock, *quorum.Round, error) {
	return c.attemptLock(ctx, newLock(c, resource, c.newToken()), ttl, nil)
}

// attemptLock is attempt for l's keys, asked by a wait policy's asker a
// (nil: setNX). The Attempt and Acquire hooks hear of it.
func (c *Client) attemptLock(ctx context.Context, l *Lock, ttl time.Duration, a wait.Asker[*Lock]) (*Lock, *quorum.Round, error) {
	if c.cfg.hooks.Attempt == nil && c.cfg.hooks.Acquire == nil {
		return c.lockRound(ctx, l, ttl, a)
	}
	start := time.Now()
	got, round, err := c.lockRound(ctx, l, ttl, a)
	c.attempted(ctx, time.Since(start), got, err, true)
	return got, round, err
}

// lockRound is attemptLock without the hook.
func (c *Client) lockRound(ctx context.Context, l *Lock, ttl time.Duration, a wait.Asker[*Lock]) (*Lock, *quorum.Round, error) {
	if err := c.admit(ctx); err != nil {
		return nil, nil, err
	}
	c.warmed(ctx)
	// Redis keeps whole milliseconds; count only what it keeps.
	ttl = ttl.Truncate(time.Millisecond)
	l.ttl = ttl
	c.watcher.Issued(ttl) // before the round: this TTL is one a restarted master may have lost
	group := c.group
	if a != nil {
		group.Timeout += a.Prepare(l, ttl)
	}
	start, boot := c.clock.now()
	round := group.Do(ctx, c.observeVotes(func(ctx context.Context, i int) (bool, error) {
		var set bool
		var err error
		if a == nil {
			set, err = c.setNX(ctx, i, l, ttl)
		} else {
			set, err = a.Ask(ctx, i, l, ttl)
		}
		// Without an error, set is false when the key was held by another
		// token or of another type (the release that follows tells which).
		return c.vote(i, set, err)
	}))
	l.round = round
	if bugs.LeaseFromRoundEnd {
		start, boot = c.clock.now()
	}
	if a != nil {
		a.Asked(l, round, start, boot)
	}
	lease := c.lease(ttl)
	deadline := start.Add(lease)
	l.untilBoot = boot + lease
	if round.Count(quorum.Agreed) < c.quorum {
		released := c.abandon(ctx, round, l)
		return nil, round, c.roundError(ctx, round, a, released)
	}
	if l.over(deadline, l.untilBoot) {
		c.abandon(ctx, round, l)
		return nil, nil, fmt.Errorf("%w: majority reached after %v, no validity left of ttl %v",
			ErrQuorumUnavailable, time.Since(start), ttl)
	}
	if c.cfg.minter != nil {
		if err := c.mint(ctx, l, deadline); err != nil {
			c.abandon(ctx, round, l)
			return nil, nil, err
		}
	}
	l.until = deadline
	// A held lock's release goes to every master, with release.lua: one
	// that refused a queued attempt may have handed the key to its token
	// since.
	l.refusedClean, l.undo = false, nil
	return l, nil, nil
}

// setNX is master i's call of a plain attempt on l: SET NX, or for several
// resources one script that sets all of them or none.
func (c *Client) setNX(ctx context.Context, i int, l *Lock, ttl time.Duration) (bool, error) {
	return call(c, ctx, i, func(ctx context.Context, m driver.Conn) (bool, error) {
		if len(l.keys) == 1 {
			return m.SetNX(ctx, l.keys[0], l.token, ttl)
		}
		return acquireAll(ctx, m, l.keys, []any{l.token, ttl.Milliseconds()})
	})
}

// mint takes a fence for each of l's resources, in order, before deadline.
func (c *Client) mint(ctx context.Context, l *Lock, deadline time.Time) error {
	// A timeout, not a deadline: deadline was read on the client's clock,
	// which a context's timer does not read (the simulator gives a client
	// a clock of its own; time.Now's monotonic reading serves otherwise).
	now, _ := c.clock.now()
	mctx, cancel := context.WithTimeout(ctx, deadline.Sub(now))
	defer cancel()
	for i := range max(len(l.multi), 1) {
		res := l.resource
		if l.multi != nil {
			res = l.multi[i]
		}
		v, err := c.cfg.minter.Mint(mctx, res)
		switch {
		case err != nil:
			return errors.Join(ErrFenceUnavailable, err)
		case l.over(deadline, l.untilBoot):
			return fmt.Errorf("%w: fence %d minted after the lock's validity ran out", ErrFenceUnavailable, v)
		}
		if i == 0 {
			l.fence, l.fenced = v, true
		}
		if l.fences != nil {
			l.fences[i] = v
		}
	}
	return nil
}

// abandon releases the key of a failed attempt on every master, with a
// context that the caller's cancellation does not reach: a master whose SET
// is still in flight gets its release after that SET returns.
func (c *Client) abandon(ctx context.Context, round *quorum.Round, l *Lock) []release {
	return l.releaseAll(ctx, round, nil)
}

// isWrongType reports a key of another type than string under the lock's
// name. SET NX cannot tell it from a key held by another client; the
// compare-and-delete that follows every lost attempt can.
func isWrongType(err error) bool {
	return err != nil && strings.Contains(err.Error(), "WRONGTYPE")
}

// roundError builds the error of a lost round: ErrNotAcquired when others
// held the lock, ErrQuorumUnavailable when masters that failed or did not
// answer (before the round's deadline or the caller's) alone put a majority
// out of reach, ErrWrongType when masters whose key has another type do;
// joined with what the round got on each master it asked, in the masters'
// order (see gotError), then the failures of the release that followed,
// and ctx.Err() when the context ended the round. A master that refused
// because its key has another type (found by the release that followed,
// or by a call that answered after the round was decided) counts as
// failed.
func (c *Client) roundError(ctx context.Context, round *quorum.Round, a wait.Asker[*Lock], released []release) error {
	if round.TimedOut {
		c.diagnosed(round)
	}
	var got, cleanup []error
	wrong, failed := 0, 0
	for i := range c.masters {
		err := round.Err(i)
		if errors.Is(err, wait.ErrNotAsked) || a != nil && a.Unasked(round, i) {
			continue // the asker did not make this call: it says nothing of the master
		}
		if _, late, returned := round.Returned(i); err == nil && returned && isWrongType(late) {
			// It answered after the round was decided (its undo waited
			// for it): a wrong type counts whenever it came.
			err = late
		}
		switch {
		case err == nil && round.Answer(i) != quorum.Agreed && isWrongType(released[i].err()):
			err = fmt.Errorf("lock key holds another type: %w", released[i].err())
			wrong++
		case isWrongType(err):
			// The fair lock script reads the key: its call fails so.
			wrong++
		case err == nil:
			got = append(got, c.gotError(round, i, &released[i]))
			if rerr := released[i].err(); rerr != nil {
				cleanup = append(cleanup, c.masterError(i, "release", rerr))
			}
			continue
		}
		failed++
		got = append(got, c.masterError(i, "acquire", err))
	}
	all := append(got, cleanup...)
	if wrong > len(c.masters)-c.quorum {
		return c.classify(ctx, 0, ErrWrongType, all)
	}
	err := c.classify(ctx, failed, ErrNotAcquired, all)
	won := round.Count(quorum.Agreed) > 0
	for i := range released {
		won = won || released[i].state.Load() == releasedHeld
	}
	if won && errors.Is(err, ErrNotAcquired) {
		err = errors.Join(err, ErrVotesSplit)
	}
	return err
}

// gotError is what master i, which did not fail lost round, gave it (r:
// its release): the key (released again; the release's failure follows
// if it failed), a refusal naming the holder by the start of its token
// when the release read it, or nothing yet when the round was decided
// without it. A call that failed after the round was decided says how.
func (c *Client) gotError(round *quorum.Round, i int, r *release) *MasterError {
	agreed, err, ok := round.Returned(i)
	var got error
	switch {
	case !ok:
		got = errNotWaited
	case err != nil:
		return c.masterError(i, "acquire", err)
	case agreed:
		got = errSetReleased
	case r.state.Load() != releasedNotOurs || r.holder == "":
		got = errHeldByAnother
	case r.holder == reservedToken:
		got = fmt.Errorf("%w: reserved for the head of its fair wait queue", errRefusedHeld)
	default:
		got = fmt.Errorf("%w: held by token %q", errRefusedHeld, tokenPrefix(r.holder))
	}
	return &MasterError{Addr: c.addrs[i], Op: "acquire", Err: got}
}

// What a lost round got on a master that did not fail it (gotError).
var (
	errSetReleased   = errors.New("set, then released: the attempt lost")
	errRefusedHeld   = errors.New("refused")
	errHeldByAnother = fmt.Errorf("%w: held by another token", errRefusedHeld)
	errNotWaited     = errors.New("no answer yet: the attempt was lost without it (released once it answers)")
)

// tokenPrefix is enough of a holder's token to match it with what
// [Client.Inspect] shows, not enough to release the lock with: errors are
// logged where tokens should not be.
func tokenPrefix(token string) string {
	if r := []rune(token); len(r) > 8 {
		return string(r[:8]) + "…"
	}
	return token
}

// classify joins the sentinel of a lost round with the per-master errors:
// ErrQuorumUnavailable when the failed masters alone make a majority
// impossible, otherwise lost (ErrNotAcquired, ErrLockNotHeld,
// ErrWrongType); ctx.Err() joined in when the context ended the round. A
// master that had not answered when the caller's context ended counts as
// failed: it did not answer in the time the caller gave.
func (c *Client) classify(ctx context.Context, failed int, lost error, errs []error) error {
	kind := lost
	if failed > len(c.masters)-c.quorum {
		kind = ErrQuorumUnavailable
	}
	ctxErr := ctx.Err()
	if len(errs) == 0 && ctxErr == nil {
		return kind
	}
	all := make([]error, 0, len(errs)+2)
	all = append(append(all, kind), errs...)
	if ctxErr != nil {
		all = append(all, ctxErr)
	}
	return errors.Join(all...)
}

// cutShort reports a round that the caller's context ended with masters
// still to answer: its error says what the masters did not have time to
// say, and a Lock that retried reports the attempt before it.
func cutShort(ctx context.Context, round *quorum.Round) bool {
	return ctx.Err() != nil && round != nil && !round.TimedOut && round.Unanswered() > 0
}

// diagnosed waits, at most a quarter of the node timeout, for the dials
// that diagnose the masters of round that did not answer in time and have
// no cause yet, so that the error of the first attempt that finds a port
// refused already says so. A refused dial returns at once; a master that
// accepts connections, however hung, gives no cause and costs no wait.
func (c *Client) diagnosed(round *quorum.Round) {
	var waits []chan struct{}
	for i := range c.masters {
		if !errors.Is(round.Err(i), quorum.ErrTimeout) {
			continue
		}
		h := &c.health[i]
		if f := h.lastFailure.Load(); f != nil && f.at > h.LastReply() {
			continue
		}
		c.diagnose(i, c.nanos())
		if d := h.diagnosis.Load(); d != nil {
			waits = append(waits, *d)
		}
	}
	if len(waits) == 0 {
		return
	}
	t := time.NewTimer(c.cfg.nodeTimeout / 4)
	defer t.Stop()
	for _, d := range waits {
		select {
		case <-d:
		case <-t.C:
			return
		}
	}
}

// notAttempted is the error of a call whose context had ended before its
// first attempt: nothing was tried, and nothing is known of the holders
// or the masters. The Attempt hook hears of it as an attempt.
func (c *Client) notAttempted(ctx context.Context, err error) error {
	err = fmt.Errorf("redlock: not attempted: the context had ended: %w", err)
	if c.cfg.hooks.Attempt != nil {
		c.attempted(ctx, 0, nil, err, false)
	}
	return err
}
