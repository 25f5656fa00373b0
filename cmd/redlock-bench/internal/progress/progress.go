// Package progress draws a progress bar for a long benchmark run. Workers
// only bump an atomic counter; a ticker redraws, so the bar costs the
// measured loop nothing but an add. A nil *Bar draws nothing.
package progress

import (
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
)

// Bar is a progress bar on a writer; its methods do nothing on nil.
type Bar struct {
	bar   *progressbar.ProgressBar
	count atomic.Int64
	value func() int64 // what the bar shows: the count, or the milliseconds since the start
	stop  chan struct{}
	done  sync.WaitGroup
}

// Count returns a bar that fills with Add up to total; nil when w is nil.
func Count(w io.Writer, total int64, unit string) *Bar {
	if w == nil {
		return nil
	}
	b := &Bar{}
	b.value = b.count.Load
	return b.start(w, total, unit)
}

// Time returns a bar that fills with the time passing up to planned; nil
// when w is nil or planned is under two seconds, too short to watch.
func Time(w io.Writer, planned time.Duration) *Bar {
	if w == nil || planned < 2*time.Second {
		return nil
	}
	start := time.Now()
	b := &Bar{value: func() int64 { return time.Since(start).Milliseconds() }}
	return b.start(w, planned.Milliseconds(), "ms")
}

func (b *Bar) start(w io.Writer, total int64, unit string) *Bar {
	b.stop = make(chan struct{})
	b.bar = progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription("redlock-bench"),
		progressbar.OptionShowCount(),
		progressbar.OptionSetItsString(unit),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
	b.done.Add(1)
	go b.tick()
	return b
}

func (b *Bar) tick() {
	defer b.done.Done()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			_ = b.bar.Set64(b.value())
		case <-b.stop:
			return
		}
	}
}

// Add counts n more units done.
func (b *Bar) Add(n int64) {
	if b != nil {
		b.count.Add(n)
	}
}

// Finish stops the bar and clears it.
func (b *Bar) Finish() {
	if b == nil {
		return
	}
	close(b.stop)
	b.done.Wait()
	_ = b.bar.Finish()
}
