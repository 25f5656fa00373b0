// Package rejection counts the writes that the guards of package fence and
// its subpackages refuse, so that they share one count and one error.
package rejection

import (
	"errors"
	"sync/atomic"
)

// ErrRejected is fence.ErrFenceRejected.
var ErrRejected = errors.New("fence: rejected: the storage has seen a newer fence")

var count atomic.Uint64

// Count is the number of refused writes so far.
func Count() uint64 { return count.Load() }

// Reject counts one refused write, calls hook (a guard's OnReject) unless
// it is nil, and returns ErrRejected.
func Reject(hook func()) error {
	count.Add(1)
	if hook != nil {
		hook()
	}
	return ErrRejected
}
