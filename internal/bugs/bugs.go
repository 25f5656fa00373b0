//go:build !simbugs

// Package bugs holds the switches that re-inject known bugs into the lock
// and the fence, for the simulator to prove that it finds them
// (docs/simulation.md, "Proof that it finds bugs"). In every normal build
// they are constants set to false, so the code behind them is compiled
// out; only a test binary built with -tags simbugs can turn one on.
package bugs

// The bugs; see bugs_sim.go for what each does.
const (
	DriftAdded              = false
	LeaseFromRoundEnd       = false
	CounterWithoutFloor     = false
	DoneLateAfterLease      = false
	CleanupOnCallerCtx      = false
	MonotonicLeaseOnly      = false
	ExtendKeepsKeys         = false
	ExtendOutcomeOnDone     = false
	NoReleaseRetry          = false
	FenceThroughDouble      = false
	TimedOutKeysKept        = false
	WrongTypeAtProbeRefuses = false
	ProbeWaitsForever       = false
)
