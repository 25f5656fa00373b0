package fair

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/internal/harness/memredis"
)

// TestLateAttemptLeavesLaterKey: fair_lock.lua takes over a key that holds
// a token of an earlier attempt of the same waiter (a key handed to it, or
// one its release has not reached yet), but a call of an earlier attempt
// that arrives late leaves a later attempt's key alone: that attempt may
// hold the lock with it, counted on this master.
func TestLateAttemptLeavesLaterKey(t *testing.T) {
	s := memredis.New()
	ctx := context.Background()
	attempt := func(token string) []any {
		t.Helper()
		prefix, _, _ := strings.Cut(token, ".")
		got, err := s.Conn().Eval(ctx, LockScript, []string{"lock:late"}, token, 2000, "00000000000001abcdefgh"+prefix, 1, 3000, "abcdefgh", prefix)
		require.NoError(t, err)
		return got.([]any)
	}
	s.Set("lock:late", "p.2", time.Minute)
	got := attempt("p.1")
	assert.Equal(t, int64(0), got[0], "a late call of attempt 1 took attempt 2's key")
	v, _ := s.Get("lock:late")
	assert.Equal(t, "p.2", v)
	assert.Equal(t, []any{int64(1)}, attempt("p.3"), "attempt 3 takes over attempt 2's key")
	v, _ = s.Get("lock:late")
	assert.Equal(t, "p.3", v)
	assert.Equal(t, int64(0), attempt("q.9")[0], "another waiter's key is not taken over")
}
