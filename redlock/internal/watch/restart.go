package watch

import (
	"context"
	"strconv"
	"strings"
	"time"

	"quorumlock.dev/driver"
)

// sample reads master i's run_id and uptime, bounded by the node timeout,
// and moves its restart time to what the master says. A master that does
// not answer keeps what was known: a later sample decides.
func (w *Watcher) sample(ctx context.Context, i int) {
	m := &w.masters[i]
	m.mu.Lock()
	gen, off := m.gen, m.off
	m.mu.Unlock()
	if off {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, w.cfg.NodeTimeout)
	info, err := w.cfg.Masters[i].(driver.Inspector).Info(cctx, "server")
	cancel()
	// The reply came before now: the master started at most uptime before it.
	now := w.nanos()
	if ctx.Err() != nil {
		return
	}
	runID, uptime, ok := "", time.Duration(0), false
	if err == nil {
		runID, uptime, ok = parseServerInfo(info)
	}
	if err != nil && !refused(err) {
		// No reply, or a passing error (LOADING, BUSY): a later sample decides.
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if w.stopped.Load() {
		return // Close has reset what the watcher knew
	}
	addr := w.cfg.Labels[i]
	if !ok {
		w.infoOff(m, addr, err)
		return
	}
	if m.runID != "" && runID != m.runID {
		w.cfg.Logger.Warn("redlock: master restarted", "master", addr, "run_id", runID, "was", m.runID, "uptime", uptime)
	}
	// Redis counts uptime as the difference of two wall-clock seconds: it
	// can read 1 a moment after the start. So the start is at most a second
	// later than uptime says; every sample bounds it, and the least bound
	// holds for the run_id.
	start := now - int64(uptime) + int64(time.Second)
	if runID == m.runID {
		start = min(start, m.start)
	}
	m.runID, m.start = runID, start
	if m.gen != gen {
		// A suspicion came after this sample was sent: sample again.
		w.wake()
		return
	}
	m.restartAt = start
	m.publish()
	m.sampledGen = gen
	w.reviewLocked(i, now)
}

// infoOff stops watching master m (its mu held), whose INFO server cannot
// be read: managed Redis often disables INFO, and without it there is
// nothing to watch; quarantining it for ever would cost the master.
func (w *Watcher) infoOff(m *master, addr string, err error) {
	m.off = true
	m.restartAt = noRestart
	m.publish()
	w.cfg.Logger.Warn("redlock: the restart guard cannot read INFO server; this master is never quarantined", "master", addr, "err", err)
}

// refused reports an error reply that says INFO (or TIME) will never be
// answered: not permitted (ACL) or not known (renamed away).
func refused(err error) bool {
	if !driver.IsReplyError(err) {
		return false
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "NOPERM") || strings.Contains(msg, "unknown command")
}

// parseServerInfo reads run_id and uptime_in_seconds from INFO server's
// reply.
func parseServerInfo(s string) (runID string, uptime time.Duration, ok bool) {
	var haveUp bool
	for line := range strings.Lines(s) {
		k, v, found := strings.Cut(strings.TrimRight(line, "\r\n"), ":")
		if !found {
			continue
		}
		switch k {
		case "run_id":
			runID = v
		case "uptime_in_seconds":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return "", 0, false
			}
			uptime, haveUp = time.Duration(min(n, 1<<32))*time.Second, true
		}
	}
	return runID, uptime, runID != "" && haveUp
}
