//go:build !linux

package boottime

import "time"

var start = time.Now()

// system has no clock that counts suspend off Linux: the monotonic reading serves.
func system() time.Duration { return time.Since(start) }
