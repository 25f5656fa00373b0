package redlock

import (
	"time"

	"golang.org/x/sys/unix"
)

// systemClock reads CLOCK_BOOTTIME beside the monotonic clock: Linux stops
// CLOCK_MONOTONIC (and so Go's timers) while the machine is suspended.
type systemClock struct{}

func (systemClock) now() (time.Time, time.Duration) {
	t := time.Now()
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		return t, t.Sub(processStart) // cannot fail since Linux 2.6.39; the monotonic reading otherwise
	}
	return t, time.Duration(ts.Nano())
}
