//go:build !linux

package redlock

import "time"

// systemClock has no clock that counts suspend off Linux: the monotonic
// reading serves as both.
type systemClock struct{}

func (systemClock) now() (time.Time, time.Duration) {
	t := time.Now()
	return t, t.Sub(processStart)
}
