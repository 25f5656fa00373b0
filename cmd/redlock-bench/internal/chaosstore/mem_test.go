package chaosstore

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/cmd/redlock-bench/internal/chaoscheck"
)

// TestMemStore: the memory store refuses a claim or write with an older fence, takes an equal
// one (claim then write with one fence), and keeps the shadow rows unchecked.
func TestMemStore(t *testing.T) {
	s, err := startMemStore()
	require.NoError(t, err)
	t.Cleanup(s.close)
	b := httpBackend{base: s.url, http: &http.Client{Timeout: 5 * time.Second}}
	ctx := context.Background()
	call := func(kind string, f uint64, job int64) Answer {
		a, err := b.Call(ctx, kind, "r", f, job, 1)
		require.NoError(t, err)
		return a
	}
	assert.Equal(t, Answer{Outcome: chaoscheck.OK, Job: 0}, call("claim", 5, 0))
	assert.Equal(t, chaoscheck.OK, call("write", 5, 0).Outcome)
	assert.Equal(t, Answer{Outcome: chaoscheck.OK, Job: 1}, call("claim", 7, 0))
	assert.Equal(t, chaoscheck.Rejected, call("write", 5, 1).Outcome)
	assert.Equal(t, chaoscheck.Rejected, call("claim", 6, 0).Outcome)
	assert.Equal(t, chaoscheck.OK, call("write", 7, 1).Outcome)
	call("shadow-write", 0, 0)
	call("shadow-write", 0, 0)
	assert.Equal(t, int64(2), call("shadow-read", 0, 0).Job)

	f := s.final()
	assert.Equal(t, []chaoscheck.Entry{{Job: 0, Fence: 5, Worker: 1}, {Job: 1, Fence: 7, Worker: 1}}, f.Fenced["r"])
	assert.Len(t, f.Shadow["r"], 2)
}
