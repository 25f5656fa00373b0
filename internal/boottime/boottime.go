// Package boottime is the clock that counts time the machine spent
// suspended (CLOCK_BOOTTIME on Linux), which the lock reads beside the
// monotonic clock. Now is a variable so that the simulator, whose time is
// virtual (testing/synctest), can make it follow time.Now: the machine's
// boot clock does not move inside a bubble. Nothing else sets it.
package boottime

import "time"

// Now reads the suspend-counting clock.
var Now = system

// Virtual makes Now follow time.Now, for programs whose time is virtual.
func Virtual() {
	Now = func() time.Duration { return time.Duration(time.Now().UnixNano()) }
}
