package quorum_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"quorumlock.dev/quorum"
)

func ExampleGroup_Do() {
	// Nodes 0, 1 and 2 agree at once. Nodes 3 and 4 would refuse, but they
	// are slow: they answer only after Do has returned, so Do, which decides
	// as soon as a majority agreed, reports them as pending. The round did
	// not wait for them, so they have no error and are not unanswered.
	slow := make(chan struct{})
	defer close(slow)
	call := func(ctx context.Context, node int) (bool, error) {
		if node < 3 {
			return true, nil
		}
		select {
		case <-slow:
			return false, nil
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}

	const nodes = 5
	r := quorum.Group{Nodes: nodes, Need: quorum.Majority(nodes), Timeout: time.Second}.Do(context.Background(), call)
	fmt.Println("majority agreed:", r.Count(quorum.Agreed) >= quorum.Majority(nodes))
	fmt.Printf("agreed %d, refused %d, failed %d, pending %d\n", r.Count(quorum.Agreed), r.Count(quorum.Refused), r.Count(quorum.Failed), r.Count(quorum.Pending))
	fmt.Println("timed out:", r.TimedOut, "unanswered:", r.Unanswered())
	fmt.Println("node 4 pending:", r.Answer(4) == quorum.Pending, "error:", r.Err(4))
	// Output:
	// majority agreed: true
	// agreed 3, refused 0, failed 0, pending 2
	// timed out: false unanswered: 0
	// node 4 pending: true error: <nil>
}

func ExampleRound_Unanswered() {
	// Node 0 agrees, node 1 fails and node 2 hangs: no majority either way
	// until the round's timeout passes. Node 2 then did not answer in time,
	// and it counts as unanswered, like node 1.
	hung := make(chan struct{})
	defer close(hung)
	call := func(ctx context.Context, node int) (bool, error) {
		switch node {
		case 0:
			return true, nil
		case 1:
			return false, errors.New("connection refused")
		}
		<-hung
		return true, nil
	}

	const nodes = 3
	r := quorum.Group{Nodes: nodes, Need: quorum.Majority(nodes), Timeout: 100 * time.Millisecond}.Do(context.Background(), call)
	fmt.Println("timed out:", r.TimedOut, "unanswered:", r.Unanswered())
	for i := range r.Nodes() {
		fmt.Printf("node %d: %v\n", i, r.Err(i))
	}
	// Output:
	// timed out: true unanswered: 2
	// node 0: <nil>
	// node 1: connection refused
	// node 2: quorum: node did not answer in time
}

func ExampleRound_Undo() {
	// Node 0 agrees, nodes 1 to 3 refuse, and node 4 is still busy when the
	// round is lost. Every node may have done something that must be taken
	// back, node 4 included once its call returns. Undo waits for node 4
	// until the round's deadline only, then leaves its undo to run in the
	// background; WaitUndone waits for it.
	busy := make(chan struct{})
	call := func(ctx context.Context, node int) (bool, error) {
		if node == 4 {
			<-busy
			return true, nil
		}
		return node == 0, nil
	}

	const nodes = 5
	r := quorum.Group{Nodes: nodes, Need: quorum.Majority(nodes), Timeout: 200 * time.Millisecond}.Do(context.Background(), call)
	fmt.Println("majority agreed:", r.Count(quorum.Agreed) >= quorum.Majority(nodes))

	var (
		mu     sync.Mutex
		undone []int
	)
	sorted := func() []int {
		mu.Lock()
		defer mu.Unlock()
		return slices.Sorted(slices.Values(undone))
	}
	r.Undo(context.Background(), time.Second, func(_ context.Context, node int) {
		mu.Lock()
		defer mu.Unlock()
		undone = append(undone, node)
	})
	fmt.Println("undone by Undo:", sorted())

	close(busy) // node 4's call returns; its undo runs after it
	r.WaitUndone()
	fmt.Println("undone in the end:", sorted())
	// Output:
	// majority agreed: false
	// undone by Undo: [0 1 2 3]
	// undone in the end: [0 1 2 3 4]
}
