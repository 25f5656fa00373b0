// Package model holds the Promela models of the lock (redlock.pml), the fence
// counter (fence.pml) and the fair wait policy (fair.pml), and the test that
// has SPIN check them in make test: every property where it must hold, every
// re-injected bug and the case without timing assumptions where it must fail
// (README.md in this folder, docs/model.md). Steps turns a counterexample
// that spin prints into numbered steps named after the Go code. Checker is
// redlock.pml's, fence.pml's and fair.pml's transition rules as a Go step
// function: it names the first step of a trace that the model cannot
// produce, for SPIN's own runs and the simulator's traces of the real code
// alike.
package model
