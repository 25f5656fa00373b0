package push

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"quorumlock.dev/quorum"
)

// roundOf makes a finished round whose nodes gave answers.
func roundOf(answers ...quorum.Answer) *quorum.Round {
	return quorum.Group{Nodes: len(answers), Timeout: time.Second}.Do(context.Background(), func(_ context.Context, i int) (bool, error) {
		switch answers[i] {
		case quorum.Agreed:
			return true, nil
		case quorum.Refused:
			return false, nil
		}
		return false, errors.New("down")
	})
}

func TestWakeAfter(t *testing.T) {
	A, R, F := quorum.Agreed, quorum.Refused, quorum.Failed
	held := func(tok string, ms int64) Holder { return Holder{OK: true, Token: tok, PTTL: ms} }
	gone := Holder{OK: true, PTTL: -2}
	none := Holder{}
	tests := []struct {
		name    string
		answers []quorum.Answer
		replies []Holder
		free    time.Duration
		known   bool
		holder  string
	}{
		{"one holder on all", []quorum.Answer{R, R, R}, []Holder{held("h", 300), held("h", 200), held("h", 100)}, 200 * time.Millisecond, true, "h"},
		{"ours on one, released", []quorum.Answer{A, R, R}, []Holder{none, held("h", 500), held("h", 900)}, 500 * time.Millisecond, true, "h"},
		{"key gone since", []quorum.Answer{R, R, R}, []Holder{gone, gone, held("h", 900)}, 0, true, ""},
		{"no expiry", []quorum.Answer{R, R, R}, []Holder{held("h", -1), held("h", -1), held("h", 50)}, 0, false, "h"},
		{"failed masters never free", []quorum.Answer{F, F, R}, []Holder{none, none, held("h", 50)}, 0, false, ""},
		{"split between losers", []quorum.Answer{R, R, R, R, A}, []Holder{held("a", 900), held("a", 800), held("b", 700), held("b", 600), none}, 700 * time.Millisecond, true, ""},
		{"script failed", []quorum.Answer{R, R, R}, []Holder{none, held("h", 10), held("h", 20)}, 20 * time.Millisecond, true, "h"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			free, known, holder := WakeAfter(roundOf(tt.answers...), tt.replies, quorum.Majority(len(tt.answers)))
			assert.Equal(t, tt.known, known, "known")
			if tt.known {
				assert.Equal(t, tt.free, free)
			}
			assert.Equal(t, tt.holder, holder)
		})
	}
}

// TestOwnReleaseDoesNotWake: the release of the waiter's own attempt's
// token, plain or as a handoff naming the waiter, is not worth waking for;
// another token's is.
func TestOwnReleaseDoesNotWake(t *testing.T) {
	w := &Waiter{wake: make(chan struct{}, 1), ready: make(chan struct{}, 1)}
	w.SetOwn("mine")
	if w.wants("mine", 0) {
		t.Error("woke on the release of its own attempt")
	}
	w.SetID("me", 1, 1, "")
	if w.wants("mine/me", 0) {
		t.Error("woke on its own release handing the key to it")
	}
	if !w.wants("theirs/me", 0) {
		t.Error("did not wake on another holder's handoff to it")
	}
	w.SetID("", 1, 1, "")
	if !w.wants("theirs", 0) {
		t.Error("did not wake on another holder's release")
	}
}

// TestHandoffRecorded: a handoff that names the waiter and a token is
// recorded for the master it came from; the waiter wakes once a majority
// handed it the key with its own attempt's token, not before, and not for
// an older token. One naming another waiter, or a reservation (no token),
// records nothing.
func TestHandoffRecorded(t *testing.T) {
	w := &Waiter{wake: make(chan struct{}, 1), ready: make(chan struct{}, 1)}
	w.SetID("me", 3, 2, "")
	w.SetOwn("t2")
	if w.wants("theirs/me/t2", 2) {
		t.Error("woke at the first of a majority's handoffs")
	}
	if w.wants("theirs/me/t1", 1) {
		t.Error("woke on a handoff to an older attempt's token")
	}
	w.wants("theirs/other/t9", 0)
	w.wants("theirs/me", 0)
	got := make([]string, 3)
	w.Handed(got)
	if want := []string{"", "t1", "t2"}; !slices.Equal(got, want) {
		t.Errorf("handed %q, want %q", got, want)
	}
	if !w.wants("theirs/me/t2", 0) {
		t.Error("did not wake once a majority handed it the key")
	}
}

// TestReleasedAtLogsSinceMark: after Mark, every release message is
// logged by master and token, whether it wakes the waiter or not (its own,
// another holder's than the one it sleeps on); the messages before Mark
// are not; more than the log keeps reads as any release.
func TestReleasedAtLogsSinceMark(t *testing.T) {
	w := &Waiter{wake: make(chan struct{}, 1), ready: make(chan struct{}, 1)}
	w.wants("before", 1)
	w.Mark()
	w.SetOwn("mine")
	w.SetHolder("other")
	w.wants("t1", 2)      // not the holder's: no wake, logged
	w.wants("mine", 3)    // its own: no wake, logged
	w.wants("t2/head", 1) // a reservation for a queue's head: the released token is logged
	for _, c := range []struct {
		i     int
		token string
		want  bool
	}{{1, "before", false}, {2, "t1", true}, {1, "t1", false}, {3, "mine", true}, {1, "t2", true}, {1, "t3", false}} {
		if got := w.ReleasedAt(c.i, c.token); got != c.want {
			t.Errorf("ReleasedAt(%d, %q) = %v, want %v", c.i, c.token, got, c.want)
		}
	}
	w.Mark()
	if w.ReleasedAt(2, "t1") {
		t.Error("Mark kept the log before it")
	}
	for k := range seenCap {
		w.wants("x", k)
	}
	if w.ReleasedAt(0, "absent") {
		t.Error("a full log read as overflowed")
	}
	w.wants("x", 0)
	if !w.ReleasedAt(0, "absent") {
		t.Error("a log that overflowed did not read as any release")
	}
}

// TestListeningAtAndLostSubscription: a waiter listens at a master once
// its subscription there confirmed the channel (a PING after the SUBSCRIBE
// came back), and not after the connection is lost; a loss makes a marked
// log read as any release, since what came meanwhile never reached it.
func TestListeningAtAndLostSubscription(t *testing.T) {
	w := &Waiter{channel: "lock:job", wake: make(chan struct{}, 1), ready: make(chan struct{}, 1)}
	s := &subscriber{i: 3, chans: map[string]*channel{"lock:job": {waiters: map[*Waiter]struct{}{w: {}}, batch: 2}}}
	w.subs = []*subscriber{s}
	if w.ListeningAt(3) {
		t.Error("listening before the subscription's PING came back")
	}
	s.up, s.acked = true, 2
	if !w.ListeningAt(3) {
		t.Error("not listening once the subscription confirmed the channel")
	}
	if w.ListeningAt(1) {
		t.Error("listening at a master it has no subscription on")
	}
	w.Mark()
	if w.ReleasedAt(3, "holder") {
		t.Error("a release logged that never came")
	}
	s.lost()
	if w.ListeningAt(3) {
		t.Error("listening after the connection was lost")
	}
	if !w.ReleasedAt(3, "holder") {
		t.Error("a lost connection left the log as if nothing could have been missed")
	}
	select {
	case <-w.wake:
	default:
		t.Error("a lost connection did not wake the waiter")
	}
}
