package push

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"quorumlock.dev/internal/quorum"
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
