package redlockotel_test

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"quorumlock.dev/driver"
	"quorumlock.dev/driver/goredis"
	"quorumlock.dev/redlock"
	"quorumlock.dev/redlock/redlockotel"
)

// world is a client on three in-process masters whose hooks record into
// in-memory exporters.
type world struct {
	servers []*miniredis.Miniredis
	client  *redlock.Client
	spans   *tracetest.SpanRecorder
	reader  *sdkmetric.ManualReader
	tracer  trace.Tracer // the application's, for the callers' spans
}

func newWorld(t *testing.T, opts ...redlockotel.Option) *world {
	t.Helper()
	w := &world{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(w.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(w.reader))
	w.tracer = tp.Tracer("app")
	hooks, err := redlockotel.Hooks(append([]redlockotel.Option{redlockotel.WithTracerProvider(tp), redlockotel.WithMeterProvider(mp)}, opts...)...)
	require.NoError(t, err)
	w.client = w.newClient(t, hooks)
	return w
}

func (w *world) newClient(t *testing.T, hooks redlock.Hooks) *redlock.Client {
	t.Helper()
	if w.servers == nil {
		for range 3 {
			w.servers = append(w.servers, miniredis.RunT(t))
		}
	}
	masters := make([]driver.Conn, len(w.servers))
	for i, s := range w.servers {
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialerRetries: 1})
		t.Cleanup(func() { _ = rdb.Close() })
		masters[i] = goredis.Conn(rdb)
	}
	c, err := redlock.New(masters, redlock.WithHooks(hooks), redlock.WithNodeTimeout(200*time.Millisecond),
		redlock.WithRetry(0, 5*time.Millisecond, 5*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// ended returns the ended spans named name.
func (w *world) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range w.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, key string) (attribute.Value, bool) {
	for _, a := range s.Attributes() {
		if string(a.Key) == key {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

// histogram returns the data points of the histogram named name, by the
// value of their quorumlock.outcome attribute.
func (w *world) histogram(t *testing.T, name string) map[string]uint64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, w.reader.Collect(t.Context(), &rm))
	out := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
				o, _ := dp.Attributes.Value("quorumlock.outcome")
				out[o.AsString()] += dp.Count
			}
		}
	}
	return out
}

// sum returns the values of the counter named name by outcome.
func (w *world) sum(t *testing.T, name string) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, w.reader.Collect(t.Context(), &rm))
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				o, _ := dp.Attributes.Value("quorumlock.outcome")
				out[o.AsString()] += dp.Value
			}
		}
	}
	return out
}

// A contended acquisition: each call's acquire span is a child of its
// caller's span, the waiter's has one event per attempt, each hold is a
// child of the caller's span linked to its acquisition, the histograms
// record both calls and both holds, and the waiters gauge the wait.
func TestContendedAcquisition(t *testing.T) {
	w := newWorld(t)
	ctx, holderSpan := w.tracer.Start(t.Context(), "holder request")
	holder, err := w.client.TryLock(ctx, "orders:42", 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, holder.Extend(ctx, 10*time.Second))

	wctx, waiterSpan := w.tracer.Start(t.Context(), "waiter request")
	got := make(chan error, 1)
	go func() {
		l, err := w.client.Lock(wctx, "orders:42", 10*time.Second)
		if err == nil {
			err = l.Unlock(wctx)
		}
		got <- err
	}()
	require.Eventually(t, func() bool { return w.sum(t, "quorumlock.lock.waiters")[""] == 1 },
		5*time.Second, time.Millisecond, "the waiter never waited")
	require.NoError(t, holder.Unlock(ctx))
	require.NoError(t, <-got)
	holderSpan.End()
	waiterSpan.End()

	acquires := w.ended("quorumlock.acquire")
	require.Len(t, acquires, 2)
	byParent := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range acquires {
		byParent[s.Parent().SpanID()] = s
		outcome, _ := attr(s, "quorumlock.outcome")
		assert.Equal(t, "acquired", outcome.AsString())
		_, named := attr(s, "quorumlock.resource")
		assert.False(t, named, "a resource name without WithResourceNames")
	}
	held, waited := byParent[holderSpan.SpanContext().SpanID()], byParent[waiterSpan.SpanContext().SpanID()]
	require.NotNil(t, held, "the holder's acquisition is not a child of its caller's span")
	require.NotNil(t, waited, "the waiter's acquisition is not a child of its caller's span")
	assert.Equal(t, holderSpan.SpanContext().TraceID(), held.SpanContext().TraceID())
	attempts, _ := attr(waited, "quorumlock.attempts")
	assert.GreaterOrEqual(t, attempts.AsInt64(), int64(2), "the waiter lost, then won")
	events := map[string]int{}
	for _, e := range waited.Events() {
		events[e.Name]++
	}
	assert.Equal(t, int(attempts.AsInt64()), events["quorumlock.attempt"], "an event per attempt")
	waits := w.ended("quorumlock.wait")
	require.Len(t, waits, int(attempts.AsInt64())-1, "a wait span after each lost attempt")
	for _, s := range waits {
		assert.Equal(t, waited.SpanContext().SpanID(), s.Parent().SpanID(), "a wait span is not a child of its acquisition")
		outcome, _ := attr(s, "quorumlock.outcome")
		assert.Equal(t, "woke", outcome.AsString())
	}
	held0, _ := attr(waits[0], "quorumlock.held")
	assert.True(t, held0.AsBool(), "the first wait was for a holder")

	assert.Equal(t, map[string]int64{"": 0}, w.sum(t, "quorumlock.lock.waiters"), "a waiter that won still counted")

	holds := w.ended("quorumlock.hold")
	require.Len(t, holds, 2)
	for _, h := range holds {
		outcome, _ := attr(h, "quorumlock.outcome")
		assert.Equal(t, "unlocked", outcome.AsString())
		require.Len(t, h.Links(), 1)
		link := h.Links()[0].SpanContext.SpanID()
		switch link {
		case held.SpanContext().SpanID():
			assert.Equal(t, holderSpan.SpanContext().SpanID(), h.Parent().SpanID())
		case waited.SpanContext().SpanID():
			assert.Equal(t, waiterSpan.SpanContext().SpanID(), h.Parent().SpanID())
		default:
			t.Errorf("hold linked to %v, no acquisition", link)
		}
	}
	releases := w.ended("quorumlock.release")
	require.Len(t, releases, 2, "a release span per Unlock")
	for _, r := range releases {
		outcome, _ := attr(r, "quorumlock.outcome")
		assert.Equal(t, "released", outcome.AsString())
		assert.NotEqual(t, codes.Error, r.Status().Code)
	}
	extends := w.ended("quorumlock.extend")
	require.Len(t, extends, 1)
	assert.Equal(t, holderSpan.SpanContext().SpanID(), extends[0].Parent().SpanID())

	assert.Equal(t, map[string]uint64{"acquired": 2}, w.histogram(t, "quorumlock.lock.acquire.duration"))
	assert.Equal(t, map[string]uint64{"unlocked": 2}, w.histogram(t, "quorumlock.lock.hold.duration"))
	assert.Equal(t, map[string]int64{"extended": 1}, w.sum(t, "quorumlock.lock.extensions"))
	assert.Empty(t, w.sum(t, "quorumlock.lock.lost"), "two locks unlocked, none lost")
}

// Two masters of three gone: the acquire span fails with
// quorum_unavailable, its votes say which masters failed, and the wait
// histogram records the outcome.
func TestQuorumFailure(t *testing.T) {
	w := newWorld(t)
	w.servers[1].Close()
	w.servers[2].Close()
	ctx, caller := w.tracer.Start(t.Context(), "request")
	_, err := w.client.TryLock(ctx, "orders:43", 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrQuorumUnavailable)
	caller.End()
	acquires := w.ended("quorumlock.acquire")
	require.Len(t, acquires, 1)
	s := acquires[0]
	assert.Equal(t, caller.SpanContext().SpanID(), s.Parent().SpanID())
	assert.Equal(t, codes.Error, s.Status().Code)
	outcome, _ := attr(s, "quorumlock.outcome")
	assert.Equal(t, "quorum_unavailable", outcome.AsString())
	failedVotes := 0
	for _, e := range s.Events() {
		for _, a := range e.Attributes {
			if e.Name == "quorumlock.vote" && a.Key == "quorumlock.outcome" && a.Value.AsString() == "failed" {
				failedVotes++
			}
		}
	}
	assert.Equal(t, 2, failedVotes, "the votes of the two masters that are gone")
	assert.Equal(t, map[string]uint64{"quorum_unavailable": 1}, w.histogram(t, "quorumlock.lock.acquire.duration"))
}

// A lock that nobody unlocks: its hold span ends when the lease runs out,
// failed, and the hold histogram records it as lease_ran_out.
func TestLostLock(t *testing.T) {
	w := newWorld(t, redlockotel.WithResourceNames())
	ctx, caller := w.tracer.Start(t.Context(), "request")
	l, err := w.client.TryLock(ctx, "orders:44", 300*time.Millisecond)
	require.NoError(t, err)
	caller.End()
	<-l.Done()
	holds := w.ended("quorumlock.hold")
	require.Len(t, holds, 1)
	outcome, _ := attr(holds[0], "quorumlock.outcome")
	assert.Equal(t, "lease_ran_out", outcome.AsString())
	assert.Equal(t, codes.Error, holds[0].Status().Code)
	resource, _ := attr(holds[0], "quorumlock.resource")
	assert.Equal(t, "orders:44", resource.AsString(), "WithResourceNames")
	assert.Equal(t, map[string]uint64{"lease_ran_out": 1}, w.histogram(t, "quorumlock.lock.hold.duration"))
	assert.Equal(t, map[string]int64{"lease_ran_out": 1}, w.sum(t, "quorumlock.lock.lost"))
}

// Without options the hooks use the global providers.
func TestGlobalProviders(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	prevT, prevM := otel.GetTracerProvider(), otel.GetMeterProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)))
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	t.Cleanup(func() { otel.SetTracerProvider(prevT); otel.SetMeterProvider(prevM) })
	hooks, err := redlockotel.Hooks()
	require.NoError(t, err)
	w := &world{spans: spans, reader: reader}
	w.client = w.newClient(t, hooks)
	l, err := w.client.TryLock(context.Background(), "orders:45", 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(context.Background()))
	assert.Len(t, w.ended("quorumlock.acquire"), 1)
	assert.Equal(t, map[string]uint64{"unlocked": 1}, w.histogram(t, "quorumlock.lock.hold.duration"))
}
