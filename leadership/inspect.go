package leadership

import (
	"context"
	"errors"
	"fmt"

	"quorumlock.dev/driver"
	"quorumlock.dev/internal/seam"
	"quorumlock.dev/redlock"
)

// TermInspection is what the masters and the fence counter hold for a
// role's current term ([Inspect]).
type TermInspection struct {
	Role string
	// Lock is redlock.Client.Inspect of the role's lock: each master's
	// token and remaining TTL (Lock.Masters), the token on a majority
	// (Lock.Holder) and the fence counter's value, the last fence minted
	// for the role (Lock.Fence, when Lock.FenceKnown).
	Lock redlock.Inspection
	// Records are the identity records, one per master in the order of
	// Lock.Masters.
	Records []Record
	// Leading: a majority of masters hold a record that names the token
	// holding the lock there, so Leader is who leads (as [Election.Leader]
	// would say). Leader.Fence is the term's fence, minted when it began.
	Leading bool
	Leader  Info
}

// Record is the identity record one master holds for a role: what a
// leader published there when its term began.
type Record struct {
	// Token is the lock token the record names, "" when the master holds
	// no record (or one this package cannot read).
	Token    string
	Identity string
	Fence    uint64
	// Current: the lock's key on this master held Token when the record
	// was read (in the same script): the record is this holder's, not one
	// an earlier term left.
	Current bool
	// Err is why the master could not be read; the rest is then zero.
	Err error
}

// Inspect reads, for role, who leads as an operator needs it: the role's
// lock on every master (redlock.Client.Inspect: token, time left, the
// fence counter's last fence) and each master's identity record (who
// leads, and the fence its term began with), each call bounded by c's node
// timeout. It writes nothing and mints nothing. The error is
// redlock.ErrQuorumUnavailable when a majority could not be read (with what
// the rest said), [ErrInvalidArgument] for a nil client or a bad role. Like
// any read, it can be stale by the time it returns.
func Inspect(ctx context.Context, c *redlock.Client, role string) (TermInspection, error) {
	masters, nodeTimeout := seam.ClientMasters(c)
	if c == nil || masters == nil {
		return TermInspection{}, invalid("a nil *redlock.Client")
	}
	if err := validRole(role); err != nil {
		return TermInspection{}, err
	}
	e := newElection(c, masters, role, config{nodeTimeout: nodeTimeout})
	out := TermInspection{Role: role, Records: make([]Record, len(masters))}
	var errs []error
	var err error
	if out.Lock, err = c.Inspect(ctx, e.resource); err != nil {
		errs = append(errs, err)
	}
	replies := e.fanOut(ctx, readScript, []string{e.lockKey, e.recordKey})
	failed := 0
	votes := make(map[record]int)
	for i, r := range replies {
		rec, current, err := readRecord(r)
		if err != nil {
			failed++
			out.Records[i] = Record{Err: fmt.Errorf("leadership: master %d: reading the record: %w", i, err)}
			continue
		}
		out.Records[i] = Record{Token: rec.token, Identity: rec.identity, Fence: rec.fence, Current: current}
		if current {
			votes[rec]++
		}
	}
	for rec, n := range votes {
		if n >= e.quorum() {
			out.Leading, out.Leader = true, Info{Identity: rec.identity, Fence: rec.fence}
		}
	}
	if failed > len(masters)-e.quorum() && len(errs) == 0 {
		rerrs := []error{fmt.Errorf("%w: %d of %d masters did not return the record", redlock.ErrQuorumUnavailable, failed, len(masters))}
		for _, r := range out.Records {
			if r.Err != nil {
				rerrs = append(rerrs, r.Err)
			}
		}
		errs = append(errs, errors.Join(rerrs...))
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("leadership: inspect %q: %w", role, errors.Join(errs...))
	}
	return out, nil
}

// readRecord reads read.lua's reply: the record, and whether it names the
// token the lock's key held in the same read.
func readRecord(r reply) (_ record, current bool, _ error) {
	if r.err != nil {
		return record{}, false, r.err
	}
	pair, ok := r.reply.([]any)
	if !ok || len(pair) != 2 {
		return record{}, false, driver.ErrUnexpectedReply
	}
	token, ok1 := pair[0].(string)
	s, ok2 := pair[1].(string)
	if !ok1 || !ok2 {
		return record{}, false, driver.ErrUnexpectedReply
	}
	rec, ok := parseRecord(s)
	if !ok {
		return record{}, false, nil // none, or not ours to read
	}
	return rec, token != "" && rec.token == token, nil
}
