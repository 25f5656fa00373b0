package boottime

import (
	"time"

	"golang.org/x/sys/unix"
)

var start = time.Now()

func system() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		return time.Since(start) // cannot fail since Linux 2.6.39; the monotonic reading otherwise
	}
	return time.Duration(ts.Nano())
}
