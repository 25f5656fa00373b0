// Package fencetest is the conformance kit of fence guards: [Run] checks, on a real store,
// that a guard keeps the contract that every guard of quorumlock keeps (fence.RedisGuard,
// pgfence.Guard, sqlfence.Guard): a stale fence refused and counted, with the record
// unchanged; an equal fence admitted or refused by the guard's comparison; fences compared
// exactly at every value the store holds; bad input refused before anything is written; a
// concurrent conflict told apart from a refusal; one winner between two processes; and a
// counter that lost its key not handing out a fence the store has seen.
//
// A guard's test adapts the guard to [Store], once, and adds one line:
//
//	func TestConformance(t *testing.T) { fencetest.Run(t, openStore) }
//
// Run counts [fence.Rejected], which every guard in the process shares: the test that calls it
// must not run in parallel with tests whose guards refuse writes. It starts no server and
// makes no table: the [Factory] does. It does not import the lock.
package fencetest

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/fence"
	"quorumlock.dev/internal/harness/memredis"
)

// Store is one guarded store as the kit sees it: records named by an id, each holding a value
// and the fence of the last write that the guard let through.
type Store interface {
	// Insert creates record id as it exists before any guarded write: written without the
	// guard, with no fence (0), as a migration leaves the rows it finds. The kit inserts an
	// id once, or again after it was deleted.
	Insert(ctx context.Context, id string) error
	// Write writes value to record id through the guard, offering fence, and returns the
	// guard's error.
	Write(ctx context.Context, id, value string, fence uint64) error
	// Read returns the value and the fence stored in record id, read without the guard.
	Read(ctx context.Context, id string) (value string, fence uint64, err error)
	// Process returns the store as another process reaches it: the same records and guard,
	// through a connection (client, pool) of its own, closed when t ends.
	Process(t *testing.T) Store
	// MaxFence is the largest fence the store holds exactly: math.MaxInt64 for a signed
	// 64-bit column. A larger one must be refused as fence.ErrInvalidArgument.
	MaxFence() uint64
}

// Factory returns a fresh store, with no records, whose guard compares fences with compare.
// What it opens is closed when t ends.
type Factory func(t *testing.T, compare fence.Comparison) Store

// Conflicter is a Store in which a guarded write can wait for a record that a concurrent
// transaction holds. A Store without it skips the conflict case: its guard checks and writes
// in one step that nothing else runs inside (a Redis script).
type Conflicter interface {
	// WriteWhileDeleted writes value to record id through the guard, offering fence, while
	// a transaction on another connection deletes the record and commits once the write
	// waits for it (or, where a write cannot be seen waiting, soon after the write started),
	// and returns the write's error.
	WriteWhileDeleted(ctx context.Context, id, value string, fence uint64) error
	// Retryable reports whether err is the guard's error for a write that met no row or a
	// concurrent change: nothing written, nothing refused, to be read again and retried.
	Retryable(err error) bool
}

// Renamer is a Store whose guard names a table and a fence column. A Store without it skips
// the bad names case.
type Renamer interface {
	// Names returns the table and the fence column of the store's guard.
	Names() (table, column string)
	// Rename returns the store with its guard naming table and column instead; its records
	// stay where they are.
	Rename(table, column string) Store
}

// Run runs every case of the kit, for each comparison, on stores that open makes.
func Run(t *testing.T, open Factory) {
	for _, compare := range []fence.Comparison{fence.AtLeast, fence.Newer} {
		name := "AtLeast"
		if compare == fence.Newer {
			name = "Newer"
		}
		t.Run(name, func(t *testing.T) {
			for _, c := range []struct {
				name string
				run  func(t *testing.T, s Store, compare fence.Comparison)
			}{
				{"StaleFenceRefused", staleFenceRefused},
				{"EqualFence", equalFence},
				{"ExactAtEveryValue", exactAtEveryValue},
				{"BadFence", badFence},
				{"BadNames", badNames},
				{"ConcurrentConflict", concurrentConflict},
				{"TwoProcesses", twoProcesses},
				{"CounterLostItsKey", counterLostItsKey},
			} {
				t.Run(c.name, func(t *testing.T) { c.run(t, open(t, compare), compare) })
			}
		})
	}
}

// rejected asserts that err is a refusal, counted once since before.
func rejected(t *testing.T, err error, before uint64, msg string) {
	t.Helper()
	require.ErrorIs(t, err, fence.ErrFenceRejected, msg)
	assert.Equal(t, before+1, fence.Rejected(), "%s: counted once", msg)
}

// holds asserts what record id of s holds.
func holds(t *testing.T, s Store, id, value string, stored uint64, msg string) {
	t.Helper()
	v, f, err := s.Read(t.Context(), id)
	require.NoError(t, err)
	assert.Equal(t, value, v, msg)
	assert.Equal(t, stored, f, msg)
}

func insert(t *testing.T, s Store, id string) {
	t.Helper()
	require.NoError(t, s.Insert(t.Context(), id))
}

// staleFenceRefused: the incident review's scenario. The holder of fence 41 pauses past its
// lease, the holder of 42 writes, and 41's late write is refused, counted, and leaves the
// record as 42 wrote it; the stored fence never goes down.
func staleFenceRefused(t *testing.T, s Store, _ fence.Comparison) {
	ctx := t.Context()
	insert(t, s, "stale")
	require.NoError(t, s.Write(ctx, "stale", "from 41", 41), "a first write on a record without a fence")
	require.NoError(t, s.Write(ctx, "stale", "from 42", 42), "a newer fence")
	for _, late := range []uint64{41, 1} {
		before := fence.Rejected()
		rejected(t, s.Write(ctx, "stale", "late", late), before, fmt.Sprintf("fence %d after 42", late))
		holds(t, s, "stale", "from 42", 42, "a refused write leaves the record")
	}
}

// equalFence: fence.AtLeast admits the stored fence again (one holder writes several times,
// the same values too); fence.Newer refuses it.
func equalFence(t *testing.T, s Store, compare fence.Comparison) {
	ctx := t.Context()
	insert(t, s, "equal")
	require.NoError(t, s.Write(ctx, "equal", "first", 7))
	before := fence.Rejected()
	err := s.Write(ctx, "equal", "second", 7)
	if compare == fence.Newer {
		rejected(t, err, before, "Newer refuses the stored fence")
		holds(t, s, "equal", "first", 7, "the refused write")
		return
	}
	require.NoError(t, err, "AtLeast admits the stored fence")
	require.NoError(t, s.Write(ctx, "equal", "second", 7), "the same value with the same fence: a write that changes nothing")
	assert.Equal(t, before, fence.Rejected())
	holds(t, s, "equal", "second", 7, "")
}

// exactAtEveryValue: fences are compared as integers at every value the store holds, not as
// doubles (which cannot tell 2^53 from 2^53+1), the largest is stored exactly, and one above
// it is refused as bad input without a write.
func exactAtEveryValue(t *testing.T, s Store, _ fence.Comparison) {
	ctx := t.Context()
	const big = 1 << 53
	insert(t, s, "exact")
	require.NoError(t, s.Write(ctx, "exact", "big+1", big+1))
	before := fence.Rejected()
	rejected(t, s.Write(ctx, "exact", "big", big), before, "2^53 after 2^53+1")
	require.NoError(t, s.Write(ctx, "exact", "big+2", big+2))
	holds(t, s, "exact", "big+2", big+2, "")

	top := s.MaxFence()
	insert(t, s, "max")
	require.NoError(t, s.Write(ctx, "max", "top", top), "the largest fence the store holds")
	holds(t, s, "max", "top", top, "")
	before = fence.Rejected()
	rejected(t, s.Write(ctx, "max", "below", top-1), before, "one below the largest")
	if top == math.MaxUint64 {
		return
	}
	before = fence.Rejected()
	err := s.Write(ctx, "max", "over", top+1)
	require.ErrorIs(t, err, fence.ErrInvalidArgument, "a fence above what the store holds")
	assert.NotErrorIs(t, err, fence.ErrFenceRejected)
	assert.Equal(t, before, fence.Rejected())
	holds(t, s, "max", "top", top, "nothing written")
}

// badFence: a fence of 0 is no fence (no counter mints it, and it is what a record without
// one stores): refused as bad input, not counted, nothing written.
func badFence(t *testing.T, s Store, _ fence.Comparison) {
	ctx := t.Context()
	insert(t, s, "zero")
	require.NoError(t, s.Write(ctx, "zero", "kept", 5))
	before := fence.Rejected()
	err := s.Write(ctx, "zero", "zero", 0)
	require.ErrorIs(t, err, fence.ErrInvalidArgument)
	assert.NotErrorIs(t, err, fence.ErrFenceRejected)
	assert.Equal(t, before, fence.Rejected())
	holds(t, s, "zero", "kept", 5, "nothing written")
}

// badNames: a guard whose table or column is empty, holds a control character, or would change
// the statement if it were pasted into it unquoted, writes nothing. An empty table and a
// control character are fence.ErrInvalidArgument; a name that needs quoting is refused so, or
// quoted as one name (the write then fails on a table that does not exist). An empty column
// is refused, or names the guard's default column, in which case the stale write offered here
// is refused as stale.
func badNames(t *testing.T, s Store, _ fence.Comparison) {
	r, ok := s.(Renamer)
	if !ok {
		t.Skip("the store's guard names no table or column")
	}
	ctx := t.Context()
	table, column := r.Names()
	insert(t, s, "names")
	require.NoError(t, s.Write(ctx, "names", "kept", 10))
	for _, c := range []struct {
		name, table, column string
		invalid             bool // must be fence.ErrInvalidArgument
		stale               bool // offer a stale fence: the write may be refused as stale
	}{
		{"empty table", "", column, true, false},
		{"NUL in the table", table + "\x00", column, true, false},
		{"newline in the column", table, column + "\n", true, false},
		{"table with a separator", table + "; DROP TABLE " + table, column, false, false},
		{"table with a double quote", table + `" --`, column, false, false},
		{"table with a backtick", table + "` --", column, false, false},
		{"column with an assignment", table, column + " = 0 --", false, false},
		{"empty column", table, "", false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			offer := uint64(11)
			if c.stale {
				offer = 9
			}
			before := fence.Rejected()
			err := r.Rename(c.table, c.column).Write(ctx, "names", "bad", offer)
			require.Error(t, err, "table %q, column %q", c.table, c.column)
			if c.invalid {
				assert.ErrorIs(t, err, fence.ErrInvalidArgument)
			}
			if !c.stale {
				assert.NotErrorIs(t, err, fence.ErrFenceRejected)
				assert.Equal(t, before, fence.Rejected())
			}
			holds(t, s, "names", "kept", 10, "nothing written, and the table is still there")
		})
	}
}

// concurrentConflict: a write that waited for a record a concurrent transaction deleted is
// no refusal: not fence.ErrFenceRejected, not counted, retryable; once the record is back,
// the same write with the same fence goes through.
func concurrentConflict(t *testing.T, s Store, _ fence.Comparison) {
	c, ok := s.(Conflicter)
	if !ok {
		t.Skip("the store's guard checks and writes in one step that nothing runs inside")
	}
	ctx := t.Context()
	insert(t, s, "conflict")
	require.NoError(t, s.Write(ctx, "conflict", "first", 5))
	before := fence.Rejected()
	err := c.WriteWhileDeleted(ctx, "conflict", "second", 6)
	require.Error(t, err, "a write to a record deleted meanwhile")
	assert.True(t, c.Retryable(err), "retryable: %v", err)
	assert.NotErrorIs(t, err, fence.ErrFenceRejected)
	assert.Equal(t, before, fence.Rejected(), "not counted as a rejection")

	insert(t, s, "conflict")
	require.NoError(t, s.Write(ctx, "conflict", "second", 6), "the retry")
	holds(t, s, "conflict", "second", 6, "")
}

// twoProcesses: two processes, each with its own connection, write one record at the same
// moment. With different fences, the newer write always lands and is what the record keeps:
// the older one is refused, or landed first and was overwritten. With the same fence, Newer
// lets exactly one of them through; AtLeast both (one holder writing twice).
func twoProcesses(t *testing.T, s Store, compare fence.Comparison) {
	ctx := t.Context()
	procs := [2]Store{s, s.Process(t)}
	insert(t, s, "race")
	both := func(fences [2]uint64) [2]error {
		var errs [2]error
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, p := range procs {
			wg.Go(func() {
				<-start
				errs[i] = p.Write(ctx, "race", fmt.Sprintf("process %d, fence %d", i, fences[i]), fences[i])
			})
		}
		close(start)
		wg.Wait()
		return errs
	}

	const rounds = 20
	before := fence.Rejected()
	refused := 0
	for round := range uint64(rounds) {
		older, newer := 2*round+1, 2*round+2 // both above what the record holds
		fences := [2]uint64{older, newer}
		if round%2 == 1 {
			fences = [2]uint64{newer, older}
		}
		errs := both(fences)
		for i, err := range errs {
			if fences[i] == newer {
				require.NoError(t, err, "round %d: the newest fence", round)
				holds(t, s, "race", fmt.Sprintf("process %d, fence %d", i, newer), newer, "the older write landed last")
			} else if err != nil {
				require.ErrorIs(t, err, fence.ErrFenceRejected, "round %d: the older fence", round)
				refused++
			}
		}
	}
	assert.Equal(t, before+uint64(refused), fence.Rejected(), "each refusal counted once")
	t.Logf("%d of %d older writes refused, the others landed first", refused, rounds)

	for round := range uint64(rounds) {
		same := 2*rounds + 1 + round
		errs := both([2]uint64{same, same})
		won := -1
		for i, err := range errs {
			if err == nil {
				won = i
				continue
			}
			require.ErrorIs(t, err, fence.ErrFenceRejected, "round %d", round)
		}
		if compare == fence.Newer {
			require.True(t, (errs[0] == nil) != (errs[1] == nil), "round %d: one winner with fence %d: %v", round, same, errs)
			holds(t, s, "race", fmt.Sprintf("process %d, fence %d", won, same), same, "the winner's write")
		} else {
			require.NoError(t, errs[0], "round %d: AtLeast admits the same fence twice", round)
			require.NoError(t, errs[1], "round %d: AtLeast admits the same fence twice", round)
		}
	}
}

// counterLostItsKey: the counter node loses the fence key (a restart without persistence).
// Another process, which never saw the fence minted before, mints the next one: it is above
// the one the record stores, so its write lands, and the earlier holder's late write is
// refused. The counter is a fence.RedisCounter on an in-memory Redis.
func counterLostItsKey(t *testing.T, s Store, _ fence.Comparison) {
	ctx := t.Context()
	node := memredis.New()
	mint := func() uint64 {
		t.Helper()
		c, err := fence.NewRedisCounter(node.Conn()) // a process of its own
		require.NoError(t, err)
		f, err := c.Mint(ctx, "fencetest:lost")
		require.NoError(t, err)
		return f
	}
	first := mint()
	insert(t, s, "lost")
	require.NoError(t, s.Write(ctx, "lost", "first holder", first))

	node.Restart()
	next := mint()
	require.Greater(t, next, first, "a fence handed out again after the loss")
	require.NoError(t, s.Write(ctx, "lost", "next holder", next))
	before := fence.Rejected()
	rejected(t, s.Write(ctx, "lost", "first holder, late", first), before, "the first holder after the loss")
	holds(t, s, "lost", "next holder", next, "")
}
