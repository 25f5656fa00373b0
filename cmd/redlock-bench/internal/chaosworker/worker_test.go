package chaosworker

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"

	"quorumlock.dev/redlock"
)

func TestOutcome(t *testing.T) {
	for err, want := range map[error]string{
		nil:                          "acquired",
		redlock.ErrNotAcquired:       "contended",
		redlock.ErrQuorumUnavailable: "unavailable",
		errors.Join(redlock.ErrFenceUnavailable, redlock.ErrQuorumUnavailable): "fence_unavailable",
		errors.New("boom"): "error",
	} {
		assert.Equal(t, want, outcome(err), "%v", err)
	}
}
