package leadership

import (
	_ "embed"
	"strconv"
	"strings"

	"quorumlock.dev/driver"
)

var (
	//go:embed scripts/publish.lua
	publishSrc string
	//go:embed scripts/withdraw.lua
	withdrawSrc string
	//go:embed scripts/read.lua
	readSrc string

	publishScript  = driver.NewScript(publishSrc)
	withdrawScript = driver.NewScript(withdrawSrc)
	readScript     = driver.NewScript(readSrc)
)

// record is the identity record of a term, stored at leader:{role} as
// "<token>:<fence>:<identity>": the token ties it to the lock's holder
// (hex, no colon), so that a record left by an earlier term names nobody.
type record struct {
	token    string
	fence    uint64
	identity string
}

func (r record) String() string {
	return r.token + ":" + strconv.FormatUint(r.fence, 10) + ":" + r.identity
}

func parseRecord(s string) (record, bool) {
	token, rest, ok := strings.Cut(s, ":")
	if !ok || token == "" {
		return record{}, false
	}
	f, identity, ok := strings.Cut(rest, ":")
	if !ok {
		return record{}, false
	}
	fence, err := strconv.ParseUint(f, 10, 64)
	if err != nil {
		return record{}, false
	}
	return record{token: token, fence: fence, identity: identity}, true
}
