// Package chaos is the chaos suite behind `redlock-bench chaos`: each known way a Redis lock
// fails (a paused or killed holder, masters down, a restart without persistence, a lost fence
// counter, a master's clock jump, slow, blackholed and paused masters, a Sentinel failover, a
// partition, overload; and a leader elected with package leadership paused, killed, cut off or
// resigning) injected on real redis-server processes while worker processes (this
// same program started again, see [MaybeWorker]) compete for a few resources and write through
// a fenced store. Each run verifies that its fault took effect, hands what the workers recorded
// to package chaoscheck, and [Run] sums the runs of a scenario into a [Row] that says whether
// the fence held where the lock did not. docs/chaos.md has the table and the reasoning.
//
// The scenarios are here, one file per family of faults, each fault a type that holds what its
// run needs; a run's servers, store and workers are package chaosworld's, the worker process is
// package chaosworker's, and the row and the invariants every scenario keeps are package
// chaosreport's. It starts everything it uses on loopback or in network namespaces of its own,
// in temporary dirs, and stops it by pid; it never touches servers it did not start.
package chaos
