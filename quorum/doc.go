// Package quorum runs one call on N nodes at once and decides as soon as the
// answers allow: when enough nodes have agreed, or when enough can no longer
// agree, or when the round's time is up. It never waits for the slowest node
// once the outcome is known, and it bounds each round by its own timer, so a
// node whose client ignores context deadlines still costs at most the timeout.
//
// A call that is still running when its round ends keeps running in the
// background. [Round.Undo] lets the caller take back what such calls may have
// done: the undo for a node runs only after that node's call has returned, so
// an undo never overtakes the call it undoes.
//
// The package knows nothing of Redis; the redlock package builds the Redlock
// algorithm on top of it.
package quorum
