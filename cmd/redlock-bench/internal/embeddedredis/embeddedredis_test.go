package embeddedredis

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestKeysExpireInRealTime(t *testing.T) {
	s, err := Start()
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Set("k", "v"))
	s.SetTTL("k", 50*time.Millisecond)
	assert.True(t, s.Exists("k"))
	assert.Eventually(t, func() bool { return !s.Exists("k") }, 2*time.Second, 5*time.Millisecond)
	s.Close()
	s.Close() // twice is fine
}
