package bounded

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// Wait returns when the group is done, or at by when it is not.
func TestWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var wg sync.WaitGroup
		release := make(chan struct{})
		wg.Go(func() { <-release })
		start := time.Now()
		Wait(&wg, start.Add(time.Second))
		if took := time.Since(start); took != time.Second {
			t.Fatalf("Wait on a group that never finished returned after %v, not at its bound", took)
		}
		close(release)
		synctest.Wait() // Wait's own goroutine sees the group done and ends

		var quick sync.WaitGroup
		quick.Go(func() { time.Sleep(10 * time.Millisecond) })
		start = time.Now()
		Wait(&quick, start.Add(time.Hour))
		if took := time.Since(start); took != 10*time.Millisecond {
			t.Fatalf("Wait returned after %v, not when the group finished", took)
		}
	})
}
