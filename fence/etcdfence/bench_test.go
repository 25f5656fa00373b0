package etcdfence_test

import (
	"fmt"
	"testing"

	"quorumlock.dev/fence/etcdfence"
)

var sink uint64

// BenchmarkMint mints on one resource through a client on every member of
// an in-process cluster, one mint at a time: the latency a lock adds when
// its fence comes from etcd (one Put, committed by a majority).
func BenchmarkMint(b *testing.B) {
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			c := startCluster(b, n)
			m, err := etcdfence.New(c.client())
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				v, err := m.Mint(b.Context(), "alloc:WH-01")
				if err != nil {
					b.Fatal(err)
				}
				sink = v
			}
		})
	}
}
