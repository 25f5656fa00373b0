package redlock

import (
	_ "embed"

	"quorumlock.dev/driver"
	"quorumlock.dev/redlock/internal/fair"
)

// The Lua the core sends, from scripts/. The wait policies' own scripts are
// theirs (redlock/internal/plain, redlock/internal/fair).
var (
	//go:embed scripts/release.lua
	releaseLua string
	// Every release hands the key to a fair queue's head when there is
	// one: queue.lua, the fair policy's prelude, says how.
	releaseScript = driver.NewScript(fair.QueueLua + releaseLua)

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
