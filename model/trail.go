package model

import (
	"fmt"
	"regexp"
	"strings"
)

// A step line of `spin -t -p`: "  12:	proc  3 (Client:1) redlock.pml:210 (state 7)	[stmt]".
var stepLine = regexp.MustCompile(`^\s*(\d+):\s+proc\s+(\d+) \((\w+):\d+\) \S+:(\d+) \(state \d+\)\s+\[(.*)\]$`)

// The line spin prints with the text of an assertion that failed.
var failedLine = regexp.MustCompile(`text of failed assertion: (.*)`)

// named gives the statements that tell a story their name in the code; the
// rest of a trail (loop counters, ghost variables) is left out of the steps.
var named = []struct{ stmt, name string }{
	{"now = (now+1)", "clock: one tick (keys whose TTL ran out expire)"},
	{"(((now<4)&&", "clock: one tick (keys whose TTL ran out expire)"},
	{"(((now<6)&&", "clock: one tick (keys whose TTL ran out expire)"},
	{"(((now<8)&&", "clock: one tick (keys whose TTL ran out expire)"},
	{"(((now+3)<=", "suspend: the machine sleeps 3 ticks, the monotonic clock misses them"},
	{"now = (now+3)", "suspend: the machine sleeps 3 ticks, the monotonic clock misses them"},
	{"key[m] = tok", "SET NX PX: the master sets the key (Client.setNX)"},
	{"pend[((c*3)+m)] = 1", "SET NX sent, no reply in time (quorum.Group.Do)"},
	{"pend[((c*3)+m)] = 0", "the SET NX that got no reply reaches its master, or is lost"},
	{"ctr = (ctr+1)", "won a majority with validity left; mint.lua gives the fence (Client.mint)"},
	{"inCS[c] = 1", "checks Lock.Until and starts its work"},
	{"stored = fence", "guardset.lua accepts the fenced write"},
	{"refused = 1", "guardset.lua refuses the write: its fence is below the stored one"},
	{"quar[0] = (now+3)", "master 0 restarts empty; the restart guard quarantines it"},
	{"quar[1] = (now+3)", "master 1 restarts empty; the restart guard quarantines it"},
	{"quar[2] = (now+3)", "master 2 restarts empty; the restart guard quarantines it"},
	{"key[m] = 0", "release.lua deletes the key"},
	{"cnt = 0", "the counter node loses fence:<resource>"},
	{"cnt = clk", "mint.lua: key missing, set to the node's clock (the floor)"},
	{"cnt = 1", "mint.lua: key missing, set to 1 (no floor)"},
	{"cnt = (cnt+1)", "mint.lua: INCR"},
	{"issued[v] = 1", "RedisCounter.Mint returns the fence"},
	{"pass!", "fair.Policy.Unlock passes the lock in-process (passOn)"},
	{"lost = 1", "a failed Extend ends X1's lock and releases its key (Lock.lose)"},
	{"cs[1] = 1", "X1 starts its work"},
	{"cs[2] = 1", "X2 starts its work"},
	{"cs[3] = 1", "Y1 starts its work"},
	{"key = 3", "the key goes to Y1 (fair_lock.lua, or queue.lua's hand_to_head to its claim)"},
	{"key = 2", "the key goes to X2 (fair_lock.lua, or hand_to_head)"},
	{"&&!(unlocked)))", "X2 decides to claim: no pass picked for it yet (fair.Line.Claims)"},
	{"second = 2", "X2's claim is written on the masters, queued behind Y1"},
	{"passedIn = 1", "X2 takes the lock passed in-process (Line.Deliver): it no longer waits on the masters"},
	{"key[i] = tok", "extend.lua: the key's TTL set again (Lock.Extend)"},
	{"dl[c] = (start+2)", "Extend decided: the lease moves to the Extend's start + TTL - drift (Lock.extended)"},
	{"extended = 1", "Lock.Extend begins its round"},
	{"asked = 1", "the holder asks for Lock.Context (with the bug, a lock whose lease ran out is found open)"},
}

// Steps turns the output of `spin -t -p` into numbered steps in the code's
// names: "3. Client 4 (line 88): SET NX PX: ...", with the process's
// name and pid. Statements the table does not name are left out; the
// assertion that failed ends the list.
func Steps(trail string) []string {
	var steps []string
	for line := range strings.Lines(trail) {
		m := stepLine.FindStringSubmatch(strings.TrimRight(line, "\n"))
		if m == nil {
			continue
		}
		proc, src, stmt := m[3]+" "+m[2], m[4], m[5]
		for _, n := range named {
			if strings.Contains(stmt, n.stmt) {
				steps = append(steps, fmt.Sprintf("%d. %s (line %s): %s   [%s]", len(steps)+1, proc, src, n.name, stmt))
				break
			}
		}
	}
	if m := failedLine.FindStringSubmatch(trail); m != nil {
		steps = append(steps, fmt.Sprintf("%d. the assertion fails: %s", len(steps)+1, m[1]))
	}
	return steps
}
