package redlockprom

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/driver"
	"quorumlock.dev/internal/harness/memredis"
	"quorumlock.dev/internal/seam"
	"quorumlock.dev/redlock"
)

// TestRunbookLostLock loses a renewed lock each way the runbook of
// docs/operations.md ("When a lock is lost: a pause or a stuck loop")
// tells apart, in virtual time on in-memory masters: a process paused past
// its lease (its clocks jump 20 s, seen first by the renewer) and a work
// loop that never calls Progress. The log line, its err, the cause of the
// lock's context and the series that moved are those the section quotes.
func TestRunbookLostLock(t *testing.T) {
	const ttl = 10 * time.Second
	type lost struct {
		msg, err, cause string
		outcome         string
	}
	var pause, stuck lost
	var scraped map[string]float64
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m, reg := newMetrics(t)
		var masters []driver.Conn
		for range 3 {
			masters = append(masters, memredis.New().Conn())
		}
		client := func(logs *logCapture, off *atomic.Int64) *redlock.Client {
			c, err := redlock.New(masters, redlock.WithHooks(m.Hooks()), redlock.WithLogger(slog.New(logs)),
				seam.ClientOption(pausedClock{off}, nil).(redlock.Option))
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Close() })
			return c
		}
		lose := func(t *testing.T, resource string, pause bool) lost {
			var logs logCapture
			var off atomic.Int64
			c := client(&logs, &off)
			l, err := c.TryLock(ctx, resource, ttl)
			require.NoError(t, err)
			done := l.Done() // the lease's timer looks at 0 + k s
			time.Sleep(500 * time.Millisecond)
			require.NoError(t, l.Renew(ttl, time.Minute)) // the renewer at 0.5 + k s
			if pause {
				time.Sleep(700 * time.Millisecond)
				off.Store(int64(20 * time.Second)) // SIGSTOP for 20 s, seen first by the renewer at 1.5 s
			} // else: no Progress, ever
			<-done
			synctest.Wait()
			rec := logs.only(t)
			cause := context.Cause(l.Context())
			require.ErrorIs(t, cause, redlock.ErrLockLost)
			if pause {
				assert.NotErrorIs(t, cause, redlock.ErrNoProgress, "a pause was blamed on the work loop")
			} else {
				assert.ErrorIs(t, cause, redlock.ErrNoProgress)
			}
			return lost{msg: rec.msg, err: rec.err, cause: cause.Error()}
		}
		pause = lose(t, "job:paused", true)
		pause.outcome = "lease_ran_out"
		stuck = lose(t, "job:stuck", false)
		stuck.outcome = "no_progress"
		scraped = scrape(t, reg)
	})

	doc, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(doc), "\n## When a lock is lost: a pause or a stuck loop\n")
	require.True(t, ok, "docs/operations.md has no section \"When a lock is lost: a pause or a stuck loop\"")
	section, _, _ = strings.Cut(section, "\n## ")
	for _, l := range []lost{pause, stuck} {
		assert.Contains(t, section, "`"+l.msg+"`", "the log message of %s", l.outcome)
		assert.Contains(t, section, fmt.Sprintf("`err=%q`", l.err), "the log's err of %s", l.outcome)
		assert.Contains(t, section, "`"+l.cause+"`", "the cause of %s", l.outcome)
		hold := fmt.Sprintf(`quorumlock_lock_hold_duration_seconds{outcome=%q}`, l.outcome)
		renewal := fmt.Sprintf(`quorumlock_lock_renewal_failures_total{reason=%q}`, l.outcome)
		assert.Contains(t, section, "`"+hold+"`")
		assert.Contains(t, section, "`"+renewal+"`")
		assert.Equal(t, 1.0, scraped["quorumlock_lock_hold_duration_seconds{outcome="+l.outcome+"}"], hold)
		assert.Equal(t, 1.0, scraped["quorumlock_lock_renewal_failures_total{reason="+l.outcome+"}"], renewal)
	}
	assert.Contains(t, section, "`quorumlock_lock_extensions_total{outcome=\"extended\"}`")
	_, ok = scraped["quorumlock_lock_extensions_total{outcome=extended}"]
	assert.True(t, ok, "no series quorumlock_lock_extensions_total{outcome=extended}")
}

// pausedClock is a client's clock in a bubble after a pause of the whole
// process: both of its clocks are ahead of the bubble's by *off.
type pausedClock struct{ off *atomic.Int64 }

func (c pausedClock) Now() (time.Time, time.Duration) {
	now := time.Now().Add(time.Duration(c.off.Load()))
	return now, time.Duration(now.UnixNano())
}

// logCapture keeps the records logged at Error: their message and err.
type logCapture struct {
	mu      sync.Mutex
	records []logged
}

type logged struct{ msg, err string }

func (h *logCapture) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelError }

func (h *logCapture) Handle(_ context.Context, r slog.Record) error {
	rec := logged{msg: r.Message}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" {
			if err, ok := a.Value.Any().(error); ok {
				rec.err = err.Error()
			} else {
				rec.err = a.Value.String()
			}
		}
		return true
	})
	h.mu.Lock()
	h.records = append(h.records, rec)
	h.mu.Unlock()
	return nil
}

func (h *logCapture) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logCapture) WithGroup(string) slog.Handler      { return h }

func (h *logCapture) only(t *testing.T) logged {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	require.Len(t, h.records, 1, "records at Error: %v", h.records)
	return h.records[0]
}
