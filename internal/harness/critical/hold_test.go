package critical

import (
	"testing"
	"time"
)

// TestHoldLastsItsTime: Hold never returns before its time is up. How much
// later it returns is the machine's, and not asserted.
func TestHoldLastsItsTime(t *testing.T) {
	for _, d := range []time.Duration{0, time.Microsecond, time.Millisecond, 15 * time.Millisecond} {
		start := time.Now()
		Hold(d)
		if got := time.Since(start); got < d {
			t.Errorf("Hold(%v) returned after %v", d, got)
		}
	}
}
