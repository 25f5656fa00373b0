package chaoscheck

import (
	"cmp"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// The porcupine model of one fenced row. Unknown outcomes are the delicate part: a call that
// erred or got no answer may have taken effect at any moment after it was made, even after its
// caller gave up (a command sent to a SIGSTOPped server runs when the server resumes), or never.
// So its Return is +infinity and its step always succeeds, doing what the store would have done
// with it: applied if its fence passes, nothing if not. That one deterministic step covers
// "maybe applied": a call that never reached the store linearizes after every other call
// (nothing has to follow a Return of +infinity), where no call sees its effect; a call that
// did reach it did exactly what the step does. A porcupine.NondeterministicModel offering
// {applied, not applied} at each point says the same with sets of states, which its power-set
// construction compares pairwise: slower, and no more exact.
//
// +infinity has a price: every such call stays open to the end of its row, and when a row is
// illegal porcupine tries each subset of them at each point (an outage of 15 unanswered writes
// in 431 calls ran out of 10 s). unknownReturns closes most of them early, exactly.

// row is the model's state: one resource's row of the fenced store.
type row struct {
	fence uint64 // the largest fence the row has accepted
	next  int64  // the job number a Claim returns
	// known says next is known. The check does not assume where a row's job numbers start: the
	// first Claim or Write that takes effect sets them.
	known bool
}

// call is a storage call's input, answer its output.
type call struct {
	resource string
	kind     OpKind
	fence    uint64
	job      int64 // Write: the job written
}

type answer struct {
	outcome Outcome
	job     int64 // OK Claim: the next job returned
}

func (r row) step(c call, a answer) (bool, row) {
	passes := c.fence >= r.fence
	switch a.outcome {
	case Rejected:
		return !passes, r
	case Unknown:
		if !passes {
			return true, r
		}
		return true, r.apply(c)
	}
	if !passes {
		return false, r
	}
	if c.kind == Claim {
		if r.known && a.job != r.next {
			return false, r
		}
		r.next, r.known = a.job, true
	}
	return true, r.apply(c)
}

func (r row) apply(c call) row {
	r.fence = c.fence
	if c.kind == Write {
		r.next, r.known = c.job+1, true
	}
	return r
}

var rowModel = porcupine.Model{
	// A row's calls never touch another row, so each resource is checked alone: a history is
	// linearizable if and only if every resource's part is, and porcupine's search, exponential
	// in the calls that overlap in time, runs on a few hundred calls at a time.
	Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
		parts := byResource(ops, func(op porcupine.Operation) string { return op.Input.(call).resource })
		out := make([][]porcupine.Operation, 0, len(parts))
		for _, p := range parts {
			out = append(out, p)
		}
		return out
	},
	Init: func() any { return row{} },
	Step: func(state, input, output any) (bool, any) {
		return state.(row).step(input.(call), output.(answer))
	},
	Hash: func(state any) uint64 {
		r := state.(row)
		h := r.fence*0x9e3779b97f4a7c15 ^ uint64(r.next)
		if r.known {
			h = ^h
		}
		return h
	},
}

// linearizable checks the storage calls against rowModel and says "ok", "illegal" or
// "unknown".
func linearizable(ops []Op, timeout time.Duration) string {
	unknownReturn := unknownReturns(ops)
	history := make([]porcupine.Operation, len(ops))
	for i, op := range ops {
		ret := op.Return
		if op.Outcome == Unknown {
			ret = unknownReturn(op)
		}
		// A Return before its Call would make porcupine's search ill-formed; it can only be
		// a recording error, so the call is taken as instantaneous.
		ret = max(ret, op.Call)
		a := answer{outcome: op.Outcome}
		if op.Kind == Claim && op.Outcome == OK {
			a.job = op.Job
		}
		c := call{resource: op.Resource, kind: op.Kind, fence: op.Fence}
		if op.Kind == Write {
			c.job = op.Job
		}
		history[i] = porcupine.Operation{ClientId: op.Worker, Input: c, Call: op.Call, Output: a, Return: ret}
	}
	switch porcupine.CheckOperationsTimeout(rowModel, history, timeout) {
	case porcupine.Ok:
		return "ok"
	case porcupine.Illegal:
		return "illegal"
	default:
		return "unknown"
	}
}

// unknownReturns gives the Return porcupine is to see for an op whose outcome is Unknown: the
// earliest Return of an OK call on its resource with a larger fence, or its own Call if that
// is later, or +infinity if there is no such call. This is exact: once a larger fence has taken
// effect the row refuses the op, so wherever a linearization puts it after that call it does
// nothing, and it may as well be put there, inside the shorter interval.
func unknownReturns(ops []Op) func(Op) int64 {
	type bound struct {
		fence uint64
		ret   int64 // the earliest Return of OK calls with this fence or a larger one
	}
	rows := make(map[string][]bound)
	for resource, ops := range byResource(ops, func(op Op) string { return op.Resource }) {
		var bs []bound
		for _, op := range ops {
			if op.Outcome == OK {
				bs = append(bs, bound{op.Fence, op.Return})
			}
		}
		slices.SortFunc(bs, func(a, b bound) int { return cmp.Compare(a.fence, b.fence) })
		for i := len(bs) - 2; i >= 0; i-- {
			bs[i].ret = min(bs[i].ret, bs[i+1].ret)
		}
		rows[resource] = bs
	}
	return func(op Op) int64 {
		bs := rows[op.Resource]
		i := sort.Search(len(bs), func(i int) bool { return bs[i].fence > op.Fence })
		if i == len(bs) {
			return math.MaxInt64
		}
		return max(bs[i].ret, op.Call)
	}
}
