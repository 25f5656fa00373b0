package redlock

import (
	_ "embed"

	"quorumlock.dev/driver"
)

// The Lua the lock sends, from scripts/. queue.lua is a prelude, prepended
// to each script that touches a lock's wait queue: the queue's names and
// what every release does are written there once.
var (
	//go:embed scripts/queue.lua
	queueLua string

	//go:embed scripts/release.lua
	releaseLua    string
	releaseScript = driver.NewScript(queueLua + releaseLua)

	//go:embed scripts/handoff.lua
	handoffLua    string
	handoffScript = driver.NewScript(queueLua + handoffLua)

	//go:embed scripts/fair_lock.lua
	fairLockLua    string
	fairLockScript = driver.NewScript(queueLua + fairLockLua)

	//go:embed scripts/fair_undo.lua
	fairUndoLua    string
	fairUndoScript = driver.NewScript(queueLua + fairUndoLua)

	//go:embed scripts/fair_leave.lua
	fairLeaveLua    string
	fairLeaveScript = driver.NewScript(queueLua + fairLeaveLua)

	//go:embed scripts/extend.lua
	extendLua    string
	extendScript = driver.NewScript(extendLua)

	//go:embed scripts/acquire_all.lua
	acquireAllLua    string
	acquireAllScript = driver.NewScript(acquireAllLua)

	//go:embed scripts/holder.lua
	holderLua    string
	holderScript = driver.NewScript(holderLua)
)
