//go:build simbugs

package bugs

// Set only by the simulator's bug hunt (internal/harness/sim, -tags simbugs),
// before its schedules start and not while they run.
var (
	// DriftAdded: the lease adds the clock-drift allowance instead of
	// subtracting it.
	DriftAdded bool
	// LeaseFromRoundEnd: the lease counts from the end of the winning round,
	// not from its start, so it outlives keys set early in the round.
	LeaseFromRoundEnd bool
	// CounterWithoutFloor: the fence counter starts a missing key at 1, not
	// from the node's clock, so a counter that lost its data hands out
	// fences again.
	CounterWithoutFloor bool
	// DoneLateAfterLease: Done and Context asked for after the lease ran out
	// start a timer instead of being closed (found by the simulator).
	DoneLateAfterLease bool
	// CleanupOnCallerCtx: the releases of a lost attempt run on the caller's
	// context, so a caller whose context ended mid-attempt sends none and
	// leaves its keys for a TTL (a bug of several Redlock clients).
	CleanupOnCallerCtx bool
	// MonotonicLeaseOnly: the lease ends on the monotonic clock alone, which
	// misses a suspend of the machine, not also on the clock that counts
	// it: a holder resumed after its lease ran out goes on as if it held.
	MonotonicLeaseOnly bool
	// ExtendKeepsKeys: a failed Extend ends the lock but sends no release,
	// so the keys it had (and those it extended) stay for their TTL with a
	// token nobody holds (redsync #151).
	ExtendKeepsKeys bool
	// ExtendOutcomeOnDone: an Extend whose round ends after the old lease
	// ran out fails only when Done's timer had ended the lock, that is,
	// only when Done had been asked for; otherwise it succeeds and moves
	// Until of a lock that had ended (a past bug of this project).
	ExtendOutcomeOnDone bool
	// NoReleaseRetry: a release that got no reply is not tried again, and
	// the key of a lost attempt is left to expire (the crowd defect).
	NoReleaseRetry bool
	// FenceThroughDouble: the counter's fence reaches the caller through a
	// double (as a Lua number would): above 2^53 two mints in a row can
	// return one fence, and two holders share it.
	FenceThroughDouble bool
	// TimedOutKeysKept: the release of a lost attempt skips a master whose
	// acquiring call timed out, as if the call had never been sent: the key
	// it set there (applied late, in a latency spike) is left for its TTL
	// (the keys of lost attempts left behind after a burst).
	TimedOutKeysKept bool
	// WrongTypeAtProbeRefuses: a plain waiter's probe master that finds a
	// key of another type counts as a refusal, so the other masters are
	// not asked: the wrong type is seen by one master only, no majority of
	// it is ever counted, and a waiting Lock never stops (ErrWrongType).
	WrongTypeAtProbeRefuses bool
	// ProbeWaitsForever: a plain waiter's probed attempt asks the other
	// masters only once the probe master has answered (no probeWait), and
	// counts those it never asked as failed: a hung probe master fails
	// the whole round with ErrQuorumUnavailable, naming healthy masters
	// (a false outage).
	ProbeWaitsForever bool
)
