package redlockprom

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/redlock"
)

func TestLeaders(t *testing.T) {
	l, err := NewLeaders("quorumlock", "outbox-relay", "scheduler")
	require.NoError(t, err)
	l.TermStarted("outbox-relay", 7)
	l.TermStarted("not-declared", 8) // not counted: the label set is the one given
	want := `
# HELP quorumlock_leader 1 while this process leads the role (package leadership), else 0.
# TYPE quorumlock_leader gauge
quorumlock_leader{role="outbox-relay"} 1
quorumlock_leader{role="scheduler"} 0
`
	require.NoError(t, testutil.CollectAndCompare(l, strings.NewReader(want)))
	l.TermEnded("outbox-relay", 7, nil)
	assert.Equal(t, 0.0, testutil.ToFloat64(l.gauge.WithLabelValues("outbox-relay")))
	problems, err := testutil.CollectAndLint(l)
	require.NoError(t, err)
	assert.Empty(t, problems)

	_, err = NewLeaders("bad name", "x")
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
	_, err = NewLeaders("quorumlock", "")
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
}
