package allocjobs

import (
	"context"
	"fmt"
	"sync"

	"quorumlock.dev/fence"
)

// Store is the storage the jobs write to. A fence of 0 means unfenced: the
// store checks nothing. Fenced calls compare with fence.AtLeast: the claim
// in Begin and the write in Ship carry the same fence, so the row must admit
// an equal one.
type Store interface {
	// Setup creates the stock: skus SKUs of qty units each, no shipments.
	Setup(ctx context.Context, skus int, qty int64) error
	// Begin claims the SKU's row for f (fenced runs) and reports whether
	// order has shipped. A newer fence on the row: fence.ErrFenceRejected.
	Begin(ctx context.Context, sku int, order int64, f uint64) (shipped bool, err error)
	// Ship decrements the SKU's stock and records a shipment of order,
	// unless the row carries a newer fence (fenced runs):
	// fence.ErrFenceRejected, and nothing is written.
	Ship(ctx context.Context, sku int, order int64, f uint64) error
	// Audit reads what the run left behind.
	Audit(ctx context.Context) (Audit, error)
	Close() error
}

// Audit is what the storage holds after a run.
type Audit struct {
	Shipments  int64 // shipment records
	Orders     int64 // distinct orders shipped
	Duplicates int64 // shipments beyond the first of an order
	Taken      int64 // units taken from stock
}

// MemoryStore is the embedded storage: the same conditional updates as the
// PostgreSQL store, on slices and a map under one mutex.
type MemoryStore struct {
	mu        sync.Mutex
	qty       []int64
	fences    []uint64
	shipments map[int64]int64 // order -> shipment records
}

// NewMemoryStore returns an empty store; call Setup before use.
func NewMemoryStore() *MemoryStore { return &MemoryStore{} }

func (s *MemoryStore) Setup(_ context.Context, skus int, qty int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.qty = make([]int64, skus)
	for i := range s.qty {
		s.qty[i] = qty
	}
	s.fences = make([]uint64, skus)
	s.shipments = make(map[int64]int64)
	return nil
}

func (s *MemoryStore) Begin(_ context.Context, sku int, order int64, f uint64) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.valid(sku); err != nil {
		return false, err
	}
	if f != 0 {
		if s.fences[sku] > f {
			return false, fmt.Errorf("%w: sku %d holds fence %d, claim with %d", fence.ErrFenceRejected, sku, s.fences[sku], f)
		}
		s.fences[sku] = f
	}
	return s.shipments[order] > 0, nil
}

func (s *MemoryStore) Ship(_ context.Context, sku int, order int64, f uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.valid(sku); err != nil {
		return err
	}
	if f != 0 {
		if s.fences[sku] > f {
			return fmt.Errorf("%w: sku %d holds fence %d, write with %d", fence.ErrFenceRejected, sku, s.fences[sku], f)
		}
		s.fences[sku] = f
	}
	s.qty[sku]--
	s.shipments[order]++
	return nil
}

func (s *MemoryStore) Audit(context.Context) (Audit, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var a Audit
	for _, n := range s.shipments {
		a.Shipments += n
		a.Orders++
		a.Duplicates += n - 1
	}
	a.Taken = a.Shipments
	return a, nil
}

func (s *MemoryStore) Close() error { return nil }

func (s *MemoryStore) valid(sku int) error {
	if sku < 0 || sku >= len(s.qty) {
		return fmt.Errorf("allocjobs: sku %d outside 0..%d", sku, len(s.qty)-1)
	}
	return nil
}
