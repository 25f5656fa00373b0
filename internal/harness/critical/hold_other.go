//go:build !linux

package critical

import "time"

// Hold returns after d (see hold_linux.go: elsewhere it is time.Sleep).
func Hold(d time.Duration) { time.Sleep(d) }
