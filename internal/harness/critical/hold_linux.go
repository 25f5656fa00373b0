// Package critical simulates the critical section of the benchmarks: work
// that takes a given time and then ends on time.
package critical

import (
	"syscall"
	"time"
)

// Hold returns after d, which the calling goroutine's thread spends asleep
// in the kernel. Not time.Sleep: the Go runtime waits for its timers in
// epoll_wait, whose timeout is whole milliseconds, so a sleep that a
// network event interrupts waits a whole millisecond for what was left of
// it. In the contended benchmark's rows of separate clients, where a
// waiter's round ends during every hold, time.Sleep(1ms) took 1.74 ms on
// average (p10 1.54 ms, p99 2.06 ms); in the rows whose other goroutines
// were idle, 1.14 ms: rows compared holds of different lengths. A
// section's real work (a write, a query) ends with an event, which is not
// rounded so; with Hold, a 1 ms hold took 1.08-1.11 ms on average in every
// row of one process (docs/benchmarks.md, "A 1 ms hold that lasts 1 ms").
func Hold(d time.Duration) {
	ts := syscall.NsecToTimespec(d.Nanoseconds())
	for {
		var rem syscall.Timespec
		if err := syscall.Nanosleep(&ts, &rem); err != syscall.EINTR {
			return
		}
		ts = rem // a signal (the runtime's preemption) cut it short
	}
}
