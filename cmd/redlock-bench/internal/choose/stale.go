package choose

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
)

// holder is a lock won in an experiment: its fence (0 when the option has none) and how to
// give it back.
type holder struct {
	fence   uint64
	release func(context.Context) error
}

// staleCase is the paused-holder experiment of one option: the first holder takes the
// lock with a short lease, pause makes that lease run out under it, the second holder takes
// the lock and writes, then the first one writes.
type staleCase struct {
	first  func(ctx context.Context) (holder, error)
	pause  func(ctx context.Context) error
	second func(ctx context.Context) (holder, error) // waits until it holds the lock
	write  func(ctx context.Context, h holder, value string) error
	read   func(ctx context.Context) (string, error)
}

// staleBound bounds the whole experiment, etcd's lease of whole seconds included.
const staleBound = 30 * time.Second

// runStale reports whether the first holder's late write was accepted (it returned no error
// and its value is the one stored), and what was seen, in a few words.
func runStale(ctx context.Context, sc staleCase) (bool, string, error) {
	ctx, cancel := context.WithTimeout(ctx, staleBound)
	defer cancel()
	a, err := sc.first(ctx)
	if err != nil {
		return false, "", fmt.Errorf("first holder: %w", err)
	}
	if err := sc.pause(ctx); err != nil {
		return false, "", fmt.Errorf("pause: %w", err)
	}
	b, err := sc.second(ctx)
	if err != nil {
		return false, "", fmt.Errorf("second holder, after the first one's lease: %w", err)
	}
	defer func() { _ = b.release(context.WithoutCancel(ctx)) }()
	if err := sc.write(ctx, b, "second"); err != nil {
		return false, "", fmt.Errorf("second holder's write: %w", err)
	}
	lateErr := sc.write(ctx, a, "first")
	stored, err := sc.read(ctx)
	if err != nil {
		return false, "", fmt.Errorf("read back: %w", err)
	}
	switch {
	case lateErr == nil && stored == "first":
		return true, "late write overwrote the next holder's", nil
	case lateErr == nil:
		return false, fmt.Sprintf("late write returned no error, but the store kept %q", stored), nil
	case stored != "second":
		return false, "", fmt.Errorf("late write refused (%v), but the store holds %q", lateErr, stored)
	default:
		msg, _, _ := strings.Cut(lateErr.Error(), "\n")
		return false, "refused: " + msg, nil
	}
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// uniqueName returns prefix followed by 8 random hex digits, so that no run sees another's keys.
func uniqueName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
