package node

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBreaker: the breaker's states on a clock the test moves; a master is
// out after OutAfter node timeouts (here 4 × 50 ms) without a reply.
func TestBreaker(t *testing.T) {
	const timeout = int64(50 * time.Millisecond)
	ms := int64(time.Millisecond)
	quiet := OutAfter * timeout
	t.Run("hung", func(t *testing.T) {
		var h Breaker
		ok, probe, _ := h.Enter(0, timeout)
		require.True(t, ok)
		require.False(t, probe)
		// A second call while the first is in flight: fine.
		ok, probe, _ = h.Enter(10*ms, timeout)
		require.True(t, ok)
		require.False(t, probe)
		h.Exit(20*ms, false, true) // the second replied
		// The first has been out longer than the quiet time, but the master
		// replied since: fine.
		ok, _, _ = h.Enter(quiet+10*ms, timeout)
		require.True(t, ok)
		h.Exit(quiet+10*ms, false, true)
		last := quiet + 10*ms // the last reply
		// Nothing replied for longer than the quiet time while a call was in
		// flight: out. One probe.
		ok, _, _ = h.Enter(last+quiet-ms, timeout)
		require.True(t, ok, "not out before the quiet time")
		now := last + quiet + ms
		ok, probe, _ = h.Enter(now, timeout)
		require.True(t, ok)
		require.True(t, probe)
		// A call at the very instant of the probe probes with it (which of
		// two rounds begun at one instant probes must not depend on which
		// goroutine ran first).
		ok, probe, _ = h.Enter(now, timeout)
		require.True(t, ok, "a call at the instant of the probe")
		require.True(t, probe)
		h.Abstain(probe)
		ok, _, probing := h.Enter(now+ms, timeout)
		assert.False(t, ok, "a second call while the probe runs")
		require.NotNil(t, probing, "a call held back by a probe may wait for it")
		select {
		case <-probing:
			t.Fatal("the probe's end told before it ended")
		default:
		}
		h.Exit(now+2*ms, true, false) // the probe failed without a reply
		select {
		case <-probing:
		default:
			t.Fatal("the probe's end not told")
		}
		ok, _, probing = h.Enter(now+3*ms, timeout)
		assert.False(t, ok, "a new probe before a node timeout has passed since the last")
		assert.Nil(t, probing, "no probe in flight to wait for")
		ok, probe, _ = h.Enter(now+timeout+ms, timeout)
		require.True(t, ok, "a new probe a node timeout after the last")
		require.True(t, probe)
		_, _, probing = h.Enter(now+timeout+ms+1, timeout)
		require.NotNil(t, probing)
		h.Exit(now+timeout+2*ms, true, true) // the master replied: closed again
		<-probing
		ok, probe, _ = h.Enter(now+timeout+3*ms, timeout)
		assert.True(t, ok)
		assert.False(t, probe)
	})
	t.Run("down", func(t *testing.T) {
		var h Breaker
		h.Enter(0, timeout)
		h.Exit(0, false, true)
		// Calls that fail at once: tried until the quiet time has passed.
		for now := ms; now <= quiet; now += 10 * ms {
			ok, probe, _ := h.Enter(now, timeout)
			require.True(t, ok, "at %d ms", now/ms)
			require.False(t, probe)
			h.Exit(now, false, false)
		}
		// No reply for the quiet time and the last call failed: out.
		now := quiet + 5*ms
		ok, probe, _ := h.Enter(now, timeout)
		require.True(t, ok)
		require.True(t, probe)
		h.Exit(now+ms, true, false)
		for later := now + 2*ms; later < now+timeout; later += 5 * ms {
			ok, _, _ := h.Enter(later, timeout)
			assert.False(t, ok, "at %d ms: one probe per node timeout", later/ms)
		}
		ok, probe, _ = h.Enter(now+timeout, timeout)
		require.True(t, ok)
		require.True(t, probe)
		h.Exit(now+timeout+ms, true, true) // back
		ok, probe, _ = h.Enter(now+timeout+2*ms, timeout)
		assert.True(t, ok)
		assert.False(t, probe)
	})
	t.Run("idle, then a failure", func(t *testing.T) {
		var h Breaker
		h.Enter(0, timeout)
		h.Exit(ms, false, true)
		// An hour idle, then calls that fail: idle time is not time without
		// a reply, so the master stays in until they fail for the quiet time.
		hour := int64(time.Hour)
		for now := hour; now <= hour+quiet; now += 10 * ms {
			ok, probe, _ := h.Enter(now, timeout)
			require.True(t, ok, "at %d ms after the idle hour", (now-hour)/ms)
			require.False(t, probe)
			h.Exit(now, false, false)
		}
		_, probe, _ := h.Enter(hour+quiet+20*ms, timeout)
		assert.True(t, probe, "out once the failures lasted the quiet time")
	})
	t.Run("a probe that abstains", func(t *testing.T) {
		var h Breaker
		h.Enter(0, timeout)
		h.Exit(0, false, false) // down from here on
		now := quiet + ms
		ok, probe, _ := h.Enter(now, timeout)
		require.True(t, ok)
		require.True(t, probe)
		_, _, probing := h.Enter(now+ms, timeout)
		require.NotNil(t, probing)
		h.Abstain(probe) // the caller's context ended the probe
		<-probing
		ok, probe, _ = h.Enter(now+2*ms, timeout)
		require.True(t, ok, "the next call probes: the last probe told nothing")
		require.True(t, probe)
		h.Exit(now+3*ms, true, false) // this one failed without a reply
		ok, _, probing = h.Enter(now+4*ms, timeout)
		assert.False(t, ok, "no probe within a node timeout of one that failed")
		assert.Nil(t, probing)
	})
	t.Run("idle, then a burst", func(t *testing.T) {
		var h Breaker
		h.Enter(0, timeout)
		h.Exit(ms, false, true)
		// Idle for an hour: the first calls of a busy spell are never taken
		// for stuck ones.
		hour := int64(time.Hour)
		ok, _, _ := h.Enter(hour, timeout)
		require.True(t, ok)
		ok, probe, _ := h.Enter(hour+ms, timeout)
		assert.True(t, ok)
		assert.False(t, probe)
	})
}
