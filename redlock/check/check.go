// Package check judges the settings of Redis nodes under which a Redlock
// can be granted twice or a fence repeated: each master's role, eviction
// policy and persistence, the fence counter's durability, and what each
// node's driver reports of its client. It reads (INFO, CONFIG GET) and
// never changes a setting. It knows nothing of the lock: redlock's
// Client.Check calls [Nodes] with the client's masters and its fence
// counter's node. docs/operations.md, "Checking masters", says what each
// finding means.
package check

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/internal/bounded"
)

// Nodes reads the settings of each master and of fenceNode (the fence
// counter's node; nil when there is none) and the client settings their
// drivers report, all nodes at once, each call bounded by timeout. A
// setting that cannot be read (CONFIG disabled, a node down) is
// [Unknown], not an error: the error is only ctx's.
func Nodes(ctx context.Context, timeout time.Duration, masters []driver.Conn, fenceNode driver.Conn) (Report, error) {
	if err := ctx.Err(); err != nil {
		return Report{}, err
	}
	rep := Report{Masters: make([]NodeReport, len(masters))}
	var fence *NodeReport
	var wg sync.WaitGroup
	for i, m := range masters {
		wg.Go(func() {
			rep.Masters[i] = node(ctx, timeout, fmt.Sprintf("master %d", i), m, masterRules)
			if _, ok := m.(driver.Subscriber); !ok {
				rep.Masters[i].Findings = append(rep.Masters[i].Findings, Finding{Setting: "push wake-up", Source: "client", Value: "no", Status: Warning,
					Why: "its driver cannot subscribe: Locks waiting on this master poll at the retry delay"})
			}
		})
	}
	if fenceNode != nil {
		wg.Go(func() {
			r := node(ctx, timeout, "fence counter", fenceNode, counterRules)
			fence = &r
		})
	}
	wg.Wait()
	rep.Fence = fence
	return rep, ctx.Err()
}

// node reads one node's settings, then judges them by rules.
func node(ctx context.Context, timeout time.Duration, name string, conn driver.Conn, rules func(settings) []Finding) NodeReport {
	d := driver.Describe(conn)
	addr := d.Label()
	s := settings{}
	insp, ok := conn.(driver.Inspector)
	var reach []Finding
	if !ok {
		reach = []Finding{{Setting: "settings", Source: "client", Status: Unknown,
			Why: "its driver cannot read INFO or CONFIG: the server's settings are unknown"}}
		return NodeReport{Node: name, Addr: addr, Findings: append(append(reach, rules(s)...), clientFindings(d)...)}
	}
	info, err := bounded.Call(ctx, timeout, readInfo, insp)
	if err == nil {
		for line := range strings.Lines(info) {
			if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
				s[k] = v
			}
		}
	} else if unreachable(err) {
		reach = []Finding{{Setting: "reachable", Source: "server", Value: "no", Status: Warning,
			Why: "did not answer INFO (" + err.Error() + "): its settings are unknown, and it cannot vote while this lasts"}}
	}
	// INFO shows these under other names; CONFIG is the authority when it
	// answers, and the only source for the rest.
	fromInfo := map[string]string{"maxmemory-policy": "maxmemory_policy", "appendonly": "aof_enabled"}
	down := false
	for _, p := range []string{"maxmemory-policy", "appendonly", "appendfsync", "no-appendfsync-on-rewrite", "save"} {
		if !down {
			got, err := bounded.Call(ctx, timeout, insp.ConfigGet, p)
			if v, ok := got[p]; err == nil && ok {
				s[p] = v
				continue
			}
			// No reply at all: the next calls would wait as long.
			down = err != nil && !driver.IsReplyError(err)
		}
		if v, ok := s[fromInfo[p]]; ok && fromInfo[p] != "" {
			if p == "appendonly" {
				v = map[string]string{"1": "yes", "0": "no"}[v]
			}
			s[p] = v
		}
	}
	return NodeReport{Node: name, Addr: addr, Findings: append(append(reach, rules(s)...), clientFindings(d)...)}
}

// unreachable reports an error that means the node could not be asked at
// all: no reply, or a refused login. Other error replies (INFO renamed or
// refused by an ACL) only leave settings unknown.
func unreachable(err error) bool {
	if !driver.IsReplyError(err) {
		return true
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "WRONGPASS") || strings.HasPrefix(msg, "NOAUTH")
}

// readInfo reads every default section of INFO.
func readInfo(ctx context.Context, insp driver.Inspector) (string, error) { return insp.Info(ctx, "") }

// settings are a node's INFO fields and CONFIG values, by name.
type settings map[string]string

func (s settings) finding(name string, judge func(v string) (Status, string)) Finding {
	v, ok := s[name]
	if !ok {
		return Finding{Setting: name, Source: "server", Status: Unknown, Why: "could not be read (CONFIG GET refused or the node did not answer)"}
	}
	st, why := judge(v)
	return Finding{Setting: name, Source: "server", Value: v, Status: st, Why: why}
}

func role(s settings) Finding {
	return s.finding("role", func(v string) (Status, string) {
		if v == "master" {
			return OK, "a primary: it takes the writes"
		}
		return Problem, "a replica: it refuses the lock's writes, and a replica promoted at failover may lack keys its primary granted (replication is asynchronous)"
	})
}

func version(s settings) Finding {
	return s.finding("redis_version", func(v string) (Status, string) {
		major, _, _ := strings.Cut(v, ".")
		if n, err := strconv.Atoi(major); err == nil && n >= 6 {
			return OK, "tested with 7.x"
		}
		return Warning, "older than 6.0: not tested with this library"
	})
}

func policy(s settings) Finding {
	return s.finding("maxmemory-policy", func(v string) (Status, string) {
		if v == "noeviction" {
			return OK, "a full memory refuses writes instead of dropping keys"
		}
		return Problem, "a full memory evicts keys, and every lock key has a TTL, so volatile-* evicts them too: a held lock can vanish and be granted again"
	})
}

// masterRules judge a master: a restart without persistence forgets the
// locks it voted for, which the spec answers with delayed restarts, so
// weak persistence is a warning, not a problem.
func masterRules(s settings) []Finding {
	aof := s["appendonly"] == "yes"
	return []Finding{
		version(s), role(s), policy(s),
		s.finding("appendonly", func(v string) (Status, string) {
			if v == "yes" {
				return OK, "lock keys survive a restart"
			}
			return Warning, "a restart forgets the locks it granted and can vote for a second holder: restart it only after the longest TTL has passed"
		}),
		s.finding("appendfsync", func(v string) (Status, string) {
			switch {
			case !aof:
				return OK, "not used: appendonly is off"
			case v == "always":
				return OK, "every write is on disk before the reply"
			}
			return Warning, "a crash loses the last writes (up to a second with everysec): a lock granted then is forgotten; restart only after the longest TTL"
		}),
		s.finding("save", func(v string) (Status, string) {
			switch {
			case aof:
				return OK, "the append-only file covers restarts"
			case v == "":
				return Warning, "no snapshots either: a restart starts empty"
			}
			return Warning, "snapshots only: a restart loses the locks granted since the last one"
		}),
	}
}

// counterRules judge the fence counter's node. A counter that comes back
// older than the fences handed out repeats them: a restart from a snapshot,
// a crash that loses the last mints of an append-only file not fsynced on
// every write. One that comes back missing does not: the next mint starts
// from the node's clock in µs, above every earlier fence while that clock
// does not go back (docs/fencing.md), so no persistence at all is a
// warning, and only full durability (fence.RedisCounter.CheckDurability's
// rules) is OK.
func counterRules(s settings) []Finding {
	aof := strings.EqualFold(s["appendonly"], "yes")
	fsync := func(name, good, why string) Finding {
		return s.finding(name, func(v string) (Status, string) {
			switch {
			case !aof:
				return OK, "not used: appendonly is off"
			case strings.EqualFold(v, good):
				return OK, "durable"
			}
			return Problem, why + " (want " + good + ")"
		})
	}
	return []Finding{
		version(s), role(s), policy(s),
		s.finding("appendonly", func(v string) (Status, string) {
			switch {
			case aof:
				return OK, "durable"
			case s["save"] == "":
				return Warning, "no persistence: a restart loses the counters, and the next mints start from the node's clock, above every fence handed out while that clock does not go back; appendonly yes keeps them"
			}
			return Problem, "snapshots only: a restart restores counters older than the fences handed out since the snapshot, and those fences repeat (want appendonly yes, or no persistence at all)"
		}),
		fsync("appendfsync", "always", "a crash loses the last mints and the counter comes back older: fences repeat"),
		fsync("no-appendfsync-on-rewrite", "no", "mints during a rewrite are not fsynced: a crash then brings the counter back older and repeats fences"),
	}
}

// clientFindings are the settings of a node's client that its driver
// reports.
func clientFindings(d driver.Description) []Finding {
	if d.Settings == nil {
		return []Finding{{Setting: "options", Source: "client", Status: Unknown, Why: "its driver reports no client settings"}}
	}
	f := make([]Finding, len(d.Settings))
	for i, st := range d.Settings {
		f[i] = Finding{Setting: st.Name, Source: "client", Value: st.Value, Status: OK, Why: st.Why}
		if st.Warn {
			f[i].Status = Warning
		}
	}
	return f
}
