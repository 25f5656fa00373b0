package chaoscheck

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestLinearizable(t *testing.T) {
	tests := []struct {
		name string
		ops  []Op
		want string
	}{{
		name: "sequential holders",
		ops: []Op{
			claim(1, "r", 1, 0, 10, 11, OK), write(1, "r", 1, 0, 12, 13, OK),
			claim(2, "r", 2, 1, 20, 21, OK), write(2, "r", 2, 1, 22, 23, OK),
		},
		want: "ok",
	}, {
		name: "rows start anywhere",
		ops:  []Op{claim(1, "r", 1, 41, 10, 11, OK), write(1, "r", 1, 41, 12, 13, OK), claim(2, "r", 2, 42, 20, 21, OK)},
		want: "ok",
	}, {
		// Only fence 1 before fence 2 explains two OK claims: the checker must find that order
		// although fence 2's call returned first.
		name: "concurrent claims in the order only the model can tell",
		ops:  []Op{claim(1, "r", 1, 0, 10, 30, OK), claim(2, "r", 2, 0, 12, 20, OK), write(2, "r", 2, 0, 31, 32, OK)},
		want: "ok",
	}, {
		name: "a concurrent smaller claim rejected",
		ops:  []Op{claim(2, "r", 2, 0, 10, 20, OK), claim(1, "r", 1, 0, 12, 25, Rejected), write(2, "r", 2, 0, 26, 27, OK)},
		want: "ok",
	}, {
		name: "one fence claims then writes, and fence 0 is accepted by a row without fences",
		ops: []Op{
			claim(1, "r", 0, 0, 10, 11, OK), claim(2, "r", 0, 0, 12, 13, OK),
			write(1, "r", 0, 0, 14, 15, OK), write(2, "r", 0, 0, 16, 17, OK),
			claim(1, "r", 0, 1, 18, 19, OK),
		},
		want: "ok",
	}, {
		name: "two resources are two rows",
		ops: []Op{
			claim(1, "a", 5, 0, 10, 11, OK), claim(2, "b", 1, 0, 12, 13, OK),
			write(2, "b", 1, 0, 14, 15, OK), write(1, "a", 5, 0, 16, 17, OK),
		},
		want: "ok",
	}, {
		name: "a claim returning a job no order explains",
		ops:  []Op{claim(1, "r", 1, 0, 10, 11, OK), write(1, "r", 1, 0, 12, 13, OK), claim(2, "r", 2, 5, 20, 21, OK)},
		want: "illegal",
	}, {
		name: "two claims with no write between returning different jobs",
		ops:  []Op{claim(1, "r", 1, 0, 10, 11, OK), claim(2, "r", 2, 1, 20, 21, OK)},
		want: "illegal",
	}, {
		name: "a write accepted below a completed claim's fence",
		ops:  []Op{claim(2, "r", 2, 0, 10, 11, OK), write(1, "r", 1, 0, 12, 13, OK)},
		want: "illegal",
	}, {
		name: "a claim rejected with no larger fence on the row",
		ops:  []Op{claim(1, "r", 1, 0, 10, 11, OK), claim(2, "r", 2, 0, 12, 13, Rejected)},
		want: "illegal",
	}, {
		name: "an unanswered write that took effect",
		ops:  []Op{claim(1, "r", 1, 0, 10, 11, OK), write(1, "r", 1, 0, 12, 0, Unknown), claim(2, "r", 2, 1, 20, 21, OK)},
		want: "ok",
	}, {
		name: "an unanswered write that did not take effect",
		ops:  []Op{claim(1, "r", 1, 0, 10, 11, OK), write(1, "r", 1, 0, 12, 0, Unknown), claim(2, "r", 2, 0, 20, 21, OK)},
		want: "ok",
	}, {
		name: "an unanswered write explains job 0 or 1, not 2",
		ops:  []Op{claim(1, "r", 1, 0, 10, 11, OK), write(1, "r", 1, 0, 12, 0, Unknown), claim(2, "r", 2, 2, 20, 21, OK)},
		want: "illegal",
	}, {
		// The error came back at 13, yet the write landed after the claim at 14-15 (job 0)
		// and before the one at 21-22 (job 1): an erring call's effect is not bounded by its
		// answer.
		name: "an erring write that took effect after it returned",
		ops: []Op{
			claim(1, "r", 1, 0, 10, 11, OK), write(1, "r", 1, 0, 12, 13, Unknown),
			claim(1, "r", 1, 0, 14, 15, OK), claim(1, "r", 1, 1, 21, 22, OK),
		},
		want: "ok",
	}, {
		// A claim of fence 3 that got no answer, landing between worker 1's write (fence 1
		// accepted) and worker 2's (fence 2 refused): a ghost command run on a resumed server.
		name: "an unanswered claim that took effect late",
		ops: []Op{
			claim(1, "r", 1, 0, 10, 11, OK), claim(3, "r", 3, 0, 12, 0, Unknown),
			write(1, "r", 1, 0, 20, 21, OK), write(2, "r", 2, 0, 30, 31, Rejected),
		},
		want: "ok",
	}, {
		name: "Return 0 is no answer whatever the outcome says",
		ops:  []Op{claim(1, "r", 1, 0, 10, 11, OK), write(1, "r", 1, 0, 12, 0, OK), claim(2, "r", 2, 1, 20, 21, OK)},
		want: "ok",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, Check(History{Ops: tt.ops}, checkTimeout).Linearizable)
		})
	}
}

// TestLinearizableOutage: a store that answered none of k writes in a row, none of which
// landed, then came back. Each unanswered write stays open until a larger fence takes effect;
// left open to the end, 15 of them kept porcupine from proving the row illegal within 10 s.
func TestLinearizableOutage(t *testing.T) {
	outage := func(k int, job int64) []Op {
		var ops []Op
		at, fence := int64(1000), uint64(0)
		for i := range k {
			fence++
			ops = append(ops, claim(i%8, "r", fence, 0, at+1, at+5, OK), write(i%8, "r", fence, 0, at+6, 0, Unknown))
			at += 100
		}
		for j := range int64(200) {
			fence++
			ops = append(ops, claim(int(j%8), "r", fence, j, at+1, at+5, OK), write(int(j%8), "r", fence, j, at+6, at+8, OK))
			at += 100
		}
		return append(ops, claim(1, "r", fence+1, job, at+1, at+5, OK))
	}
	assert.Equal(t, "ok", Check(History{Ops: outage(40, 200)}, checkTimeout).Linearizable)
	assert.Equal(t, "illegal", Check(History{Ops: outage(40, 207)}, checkTimeout).Linearizable)
}
