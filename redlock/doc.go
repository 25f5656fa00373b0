// Package redlock is a distributed lock over N independent Redis masters
// (the Redlock algorithm), with an optional fencing token. One master is the
// single-instance mode, with the same API.
//
// # What a lock is
//
// [Client.TryLock] writes a random token to lock:<resource> on every master
// at once (SET NX PX, each call bounded by the node timeout) and wins when a
// majority, Masters()/2+1, took it. The lock is then held until
// start + ttl − (factor·ttl + constant), measured on the local monotonic
// clock from before the first SET was sent; [Lock.Until] says when that is.
// The drift term ([WithDrift]) allows for the masters' clocks running at a
// different rate from ours. A lost attempt is released on every master.
//
// # Waiting
//
// [Client.Lock] waits until it wins or its context ends (cap the attempts
// with [WithRetry]). After losing to a holder it reads how long the
// holder's keys have left and sleeps until a majority of them expire, or
// until the holder's Unlock, which publishes on each master, wakes it; it
// then tries at once. The client keeps one subscription connection per
// master for this, opened at the first wait; [Client.Close] closes them.
// A lost message costs a waiter the holder's remaining TTL, never the lock.
//
// # What the lock promises, and what it does not
//
// The lock is an efficiency lock. While the assumptions below hold, no two
// clients hold it at once, so it avoids double work: two nightly jobs, two
// refreshes of one cache entry. It fails in these ways, and no choice of TTL
// or number of masters removes them:
//
//   - A process pause. A holder that stops (a GC pause, a stopped container,
//     a swapped-out page, a slow syscall) for longer than what is left of its
//     lease wakes up believing it holds the lock while another client holds
//     it. Checking Until or Done before a write narrows the window but cannot
//     close it: the pause can fall between the check and the write.
//   - A clock that jumps. Keys expire by each master's wall clock. A master
//     whose clock is stepped forward expires the key early, and the lock can
//     be won by another client while we still count on it.
//   - A restart without persistence. A master that restarts empty forgets our
//     key, and with it can hand a majority to a second client. Run masters
//     with appendonly yes and appendfsync always, or keep a restarted master
//     out of service for one maximum TTL ([WithRestartGuard] does that in the
//     client: a master that restarted does not count until then). A failover to an asynchronous
//     replica (Sentinel, Cluster) can lose our key the same way. A client
//     that moves keys between shards (a *redis.Ring) is refused.
//   - A network that delays a request beyond the node timeout: the SET may be
//     applied after we gave up (a "ghost" write). The client releases such a
//     master after the call returns, but a server that was frozen can apply
//     the SET after the release; the key then lives out its TTL, which costs
//     others time but never gives the lock to two holders.
//
// A master that hangs costs an attempt at most the node timeout, and once it
// is found stuck it is not sent more calls (one probe at a time) until it
// replies, so what it holds is capped; docs/design.md gives the bound. The
// lease also ends on the clock that counts a suspend of the machine.
//
// # Why the fence exists
//
// Only the storage that the lock protects can reject a write from a holder
// that lost its lease. [WithFence] makes every lock carry a number minted on
// one authoritative counter after the quorum is won ([Lock.Fence]); each
// new holder's number is larger than every earlier holder's. The storage
// keeps the largest number it has seen with the data and refuses writes
// that carry a smaller one. A stale holder's write then fails, whatever the
// clocks and pauses did. Use the lock alone where occasional double work is
// tolerable; add the fence where it is not. A lock that asked for a fence is
// never handed out without one: if the counter cannot be reached, the lock
// is released and the caller gets [ErrFenceUnavailable].
//
// # Holding through long work, and several resources
//
// [Lock.Context] is cancelled when the lock ends on this side (its lease ran
// out, Unlock, a failed Extend), so the holder passes it to the work it
// guards; [Client.Do] runs a function under a lock and reports a lock lost
// meanwhile ([ErrLockLost]). [Lock.Renew] extends only while the holder
// reports progress ([Lock.Progress]), up to a maximum hold. [Client.LockAll]
// takes one lock over several resources, all or nothing, with a fence each.
//
// # Keys
//
// The lock key is lock:<resource> and the fence key fence:<resource>, with
// resources named <domain>:<id> (lock:alloc:WH-01, fence:alloc:WH-01). A
// resource is 1 to 512 bytes of UTF-8 without control
// characters. Braces are Redis Cluster hash tags: use them only on purpose.
// A key of another type under lock:<resource> is reported as a per-master
// error, not as a lock held by someone else.
package redlock
