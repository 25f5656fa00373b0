// Package mintertest checks a fence counter the same way whichever store it
// keeps its values in.
package mintertest

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Minter is fence.Minter (this package cannot import fence, whose tests use it).
type Minter interface {
	Mint(ctx context.Context, resource string) (uint64, error)
}

// Concurrent mints each times on resource from workers goroutines at once,
// fails t on an error or a value minted twice, and returns the values.
func Concurrent(t *testing.T, m Minter, resource string, workers, each int) map[uint64]bool {
	t.Helper()
	var mu sync.Mutex
	seen := map[uint64]bool{}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				v, err := m.Mint(t.Context(), resource)
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				assert.False(t, seen[v], "fence %d minted twice", v)
				seen[v] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Len(t, seen, workers*each)
	return seen
}
