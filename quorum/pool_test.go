package quorum

import (
	"bytes"
	"context"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// goid is the calling goroutine's id, read from its stack's header.
func goid() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	f := bytes.Fields(buf)
	return string(f[1])
}

// ran is a round's call that records which goroutine ran each node.
func ran(mu *sync.Mutex, ids map[int]string) Call {
	return func(ctx context.Context, node int) (bool, error) {
		mu.Lock()
		ids[node] = goid()
		mu.Unlock()
		return true, nil
	}
}

// The goroutines that ran one round's calls run the next round's: none is
// started anew while enough wait.
func TestPoolReusesGoroutines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := NewPool(3)
		defer p.Close()
		g := Group{Nodes: 3, Timeout: time.Second, Pool: p}
		var mu sync.Mutex
		first, second := map[int]string{}, map[int]string{}
		r := g.Do(context.Background(), ran(&mu, first))
		r.Undo(context.Background(), time.Second, func(context.Context, int) {})
		synctest.Wait() // every worker waits for work
		require.EqualValues(t, 3, p.idle.Load())
		g.Do(context.Background(), ran(&mu, second))
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		var a, b []string
		for i := range 3 {
			a, b = append(a, first[i]), append(b, second[i])
		}
		assert.ElementsMatch(t, a, b, "the second round's calls ran on other goroutines than the first's")
	})
}

// At most maxIdle goroutines wait; Close ends them; a round after Close
// still runs, each call on a goroutine that ends with it.
func TestPoolBoundAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := runtime.NumGoroutine()
		p := NewPool(2)
		g := Group{Nodes: 5, Timeout: time.Second, Pool: p}
		var mu sync.Mutex
		r := g.Do(context.Background(), ran(&mu, map[int]string{}))
		r.Undo(context.Background(), time.Second, func(context.Context, int) {})
		synctest.Wait()
		assert.EqualValues(t, 2, p.idle.Load(), "waiting goroutines")
		assert.Equal(t, base+2, runtime.NumGoroutine(), "goroutines beyond the two that wait")
		p.Close()
		synctest.Wait()
		assert.EqualValues(t, 0, p.idle.Load())
		assert.Equal(t, base, runtime.NumGoroutine(), "Close left goroutines waiting")
		after := map[int]string{}
		r = g.Do(context.Background(), ran(&mu, after))
		assert.Equal(t, 5, r.Count(Agreed), "a round after Close")
		synctest.Wait()
		assert.Equal(t, base, runtime.NumGoroutine(), "a goroutine of a round after Close stayed")
	})
}

// A nil pool runs each call on a goroutine of its own.
func TestNilPool(t *testing.T) {
	var p *Pool
	p.Close()
	r := Group{Nodes: 3, Timeout: time.Second, Pool: p}.Do(context.Background(), func(context.Context, int) (bool, error) { return true, nil })
	assert.Equal(t, 3, r.Count(Agreed))
}

// Wait waits for the tasks still out, the undos that UndoUntil stopped
// waiting for and the functions of Go, until its deadline at most.
func TestPoolWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := NewPool(2)
		defer p.Close()
		start := time.Now()
		assert.True(t, p.Wait(start.Add(time.Second)), "nothing out")
		assert.Equal(t, start, time.Now(), "Wait with nothing out waited")

		// A round whose node 2 undoes slowly: UndoUntil returns once the
		// other two undid; the slow undo is still out.
		g := Group{Nodes: 3, Timeout: time.Second, Pool: p}
		r := g.Do(context.Background(), func(context.Context, int) (bool, error) { return true, nil })
		var undone sync.Map
		r.UndoUntil(context.Background(), time.Second, func(_ context.Context, node int) {
			if node == 2 {
				time.Sleep(30 * time.Millisecond)
			}
			undone.Store(node, true)
		}, func() bool {
			_, a := undone.Load(0)
			_, b := undone.Load(1)
			return a && b
		})
		_, slow := undone.Load(2)
		require.False(t, slow, "UndoUntil waited for the slow undo")
		start = time.Now()
		assert.True(t, p.Wait(start.Add(time.Second)))
		assert.Equal(t, 30*time.Millisecond, time.Since(start), "Wait did not wait for the slow undo")
		_, slow = undone.Load(2)
		assert.True(t, slow)

		// A function of Go that outlives the deadline: Wait gives up then.
		release := make(chan struct{})
		p.Go(func() { <-release })
		start = time.Now()
		assert.False(t, p.Wait(start.Add(50*time.Millisecond)), "Wait said nothing runs")
		assert.Equal(t, 50*time.Millisecond, time.Since(start), "Wait did not keep to its deadline")
		close(release)
		assert.True(t, p.Wait(time.Now().Add(time.Second)))

		// A nil pool has nothing to wait for.
		var none *Pool
		assert.True(t, none.Wait(time.Now()))
	})
}
