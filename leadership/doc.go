// Package leadership elects one leader per role among candidates, on the
// lock of package redlock, and fences the leader's work: each term carries
// a fence minted when it began, larger than every earlier term's, so that
// storage guarded by package fence (fence.RedisGuard, pgfence.Guard)
// refuses the writes of a leader that was deposed without knowing it.
//
// [Election.Campaign] waits until the candidate leads and returns a [Term]:
// its fence, its identity and a context that ends before another candidate
// can be elected (at the end of the lock's lease, at once when renewal
// fails). The term is renewed only while the leader shows progress
// ([Term.Progress], or the health check of [WithHealth]), never on a timer
// alone. [Term.Resign] hands over at once: the release wakes the next
// candidate. [Election.Leader] and [Election.Observe] tell anyone who leads;
// [Inspect] reads a role's term for an operator, writing nothing.
//
// What it does not do: keep a paused or cut-off leader from acting. The
// term's context ends on the leader's own clock; a process paused past it,
// or a master whose clock jumps, can leave two leaders acting at once.
// Only the fence, checked by the storage, makes their writes safe. See
// docs/leadership.md, and the package doc of redlock for the lock's
// failure modes.
package leadership
