package valkeydriver_test

import (
	"errors"
	"io/fs"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"quorumlock.dev/driver/valkeydriver/internal/twin"
)

// TestGenerated: every generated file of this package is what gen.go
// writes from the rueidis adapter today. A fix made to the rueidis adapter
// and not generated here fails, and so does an edit of a generated file.
// The rueidis adapter is beside this module in quorumlock's repository
// only: elsewhere the test skips, and under CI=true it fails.
func TestGenerated(t *testing.T) {
	stale, err := twin.Stale(".", "../rueidisdriver")
	if errors.Is(err, fs.ErrNotExist) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the rueidis adapter is not beside this module: %v", err)
		}
		t.Skipf("the rueidis adapter is not beside this module (not in quorumlock's repository): %v", err)
	}
	require.NoError(t, err)
	require.Empty(t, stale, "stale: run go generate in driver/valkeydriver (the files are ../rueidisdriver's renamed)")
}
