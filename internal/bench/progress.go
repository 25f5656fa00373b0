package bench

import (
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress draws a bar for a long run. Workers only bump an atomic counter;
// a ticker redraws, so the bar costs the measured loop nothing but an add.
type progress struct {
	bar      *progressbar.ProgressBar
	attempts atomic.Int64
	byCycles bool
	start    time.Time
	stop     chan struct{}
	done     sync.WaitGroup
}

// newProgress returns nil (a bar that draws nothing) when w is nil or the
// run is expected to take under two seconds.
func newProgress(w io.Writer, cfg Config, variants int) *progress {
	if w == nil {
		return nil
	}
	rows := int64(len(cfg.Concurrency) * variants)
	p := &progress{byCycles: cfg.Cycles > 0, start: time.Now(), stop: make(chan struct{})}
	var total int64
	if p.byCycles {
		total = cfg.Cycles * rows
	} else {
		planned := cfg.Duration * time.Duration(rows)
		if planned < 2*time.Second {
			return nil
		}
		total = planned.Milliseconds()
	}
	unit := "ms"
	if p.byCycles {
		unit = "cycles"
	}
	p.bar = progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription("redlock-bench"),
		progressbar.OptionShowCount(),
		progressbar.OptionSetItsString(unit),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
	p.done.Add(1)
	go p.tick()
	return p
}

func (p *progress) tick() {
	defer p.done.Done()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if p.byCycles {
				_ = p.bar.Set64(p.attempts.Load())
			} else {
				_ = p.bar.Set64(time.Since(p.start).Milliseconds())
			}
		case <-p.stop:
			return
		}
	}
}

func (p *progress) add(n int64) {
	if p != nil {
		p.attempts.Add(n)
	}
}

func (p *progress) finish() {
	if p == nil {
		return
	}
	close(p.stop)
	p.done.Wait()
	_ = p.bar.Finish()
}
