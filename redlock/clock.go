package redlock

import (
	"time"

	"quorumlock.dev/internal/boottime"
)

// systemClock reads the clock that counts suspend beside the monotonic
// clock: Linux stops CLOCK_MONOTONIC (and so Go's timers) while the
// machine is suspended (package boottime; off Linux the monotonic reading
// serves as both).
type systemClock struct{}

func (systemClock) now() (time.Time, time.Duration) {
	return time.Now(), boottime.Now()
}
