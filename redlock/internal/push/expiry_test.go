package push

import (
	"context"
	"errors"
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
	if w.wants("mine") {
		t.Error("woke on the release of its own attempt")
	}
	w.SetID("me")
	if w.wants("mine/me") {
		t.Error("woke on its own release handing the key to it")
	}
	if !w.wants("theirs/me") {
		t.Error("did not wake on another holder's handoff to it")
	}
	w.SetID("")
	if !w.wants("theirs") {
		t.Error("did not wake on another holder's release")
	}
}
