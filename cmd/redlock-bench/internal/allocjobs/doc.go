// Package allocjobs is the incident review's duplicate-write benchmark of the fence, and the storage it
// runs against: synthetic allocation jobs decrement stock under a lock,
// a fraction of the lock holders pause past their lease while their job is
// redelivered to another worker, and the run counts the orders shipped
// twice, once with the fence enforced by the storage and once without.
//
// A job is an order for one SKU. The worker that receives it takes the lock
// of the SKU's stock (alloc:<sku>), then, in the storage:
//
//  1. Begin: with the fence, raise the SKU row's fence to the lock's
//     (refused if the row already carries a newer one), and read whether
//     the order has shipped. Claiming the row before reading is what makes
//     the read safe: a holder whose lease expired cannot write after a
//     newer holder has read.
//  2. A paused holder stops here, past its TTL; the queue redelivers its job
//     (a visibility timeout equal to the lease) to another worker.
//  3. Ship, if the order had not shipped: decrement the stock and record a
//     shipment, with the fence only if the row's fence is not newer.
//
// Without the fence, a paused holder that resumes ships an order that the
// redelivered job has shipped already: a duplicate. With it, the paused
// holder's write is refused and counted as a rejection.
package allocjobs
