// Package redlockotel traces and measures a [redlock.Client] with
// OpenTelemetry: [Hooks] builds the client's hooks (redlock.WithHooks) from
// a TracerProvider and a MeterProvider, the global ones unless told
// otherwise. It is a module of its own, so that only a program that imports
// it links OpenTelemetry. No metric attribute carries a resource name, and a
// span does only with [WithResourceNames]: resource names are unbounded.
// docs/operations.md, "Traces and OpenTelemetry metrics", lists the spans and
// the instruments.
package redlockotel

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"quorumlock.dev/redlock"
)

// scope names the tracer and the meter.
const scope = "quorumlock.dev/redlock/redlockotel"

// Attribute keys.
const (
	keyResource = attribute.Key("quorumlock.resource")
	keyOutcome  = attribute.Key("quorumlock.outcome")
	keyAttempts = attribute.Key("quorumlock.attempts")
	keyFence    = attribute.Key("quorumlock.fence")
	keyValidity = attribute.Key("quorumlock.validity")
	keyMaster   = attribute.Key("quorumlock.master")
	keyTook     = attribute.Key("quorumlock.took")
	keyRenewed  = attribute.Key("quorumlock.renewed")
	keyHeld     = attribute.Key("quorumlock.held")
)

// Option configures [Hooks].
type Option func(*config)

type config struct {
	tp        trace.TracerProvider
	mp        metric.MeterProvider
	resources bool
}

// WithTracerProvider sets where spans go (default: otel.GetTracerProvider()).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tp = tp }
}

// WithMeterProvider sets where measurements go (default: otel.GetMeterProvider()).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.mp = mp }
}

// WithResourceNames puts the lock's resource name on its spans
// (quorumlock.resource). It is off by default: a name such as an order id
// makes as many values as there are orders.
func WithResourceNames() Option {
	return func(c *config) { c.resources = true }
}

// hooks holds the tracer and the instruments the hooks share.
type hooks struct {
	tracer    trace.Tracer
	resources bool
	acquire   metric.Float64Histogram
	hold      metric.Float64Histogram
	extends   metric.Int64Counter
	lost      metric.Int64Counter
	waiters   metric.Int64UpDownCounter
}

// callerKey is where the Acquire hook keeps the caller's span, the hold's
// parent: the context it returns carries the acquire span instead.
type callerKey struct{}

// Hooks returns the hooks of a client traced by the tracer provider and
// measured by the meter provider of opts. Spans: quorumlock.acquire, a child
// of the caller's span, with an event per attempt and per master's vote;
// quorumlock.hold, a child of the caller's span linked to the acquisition,
// until the lock ends; quorumlock.extend. Instruments: quorumlock.lock.acquire.duration and
// quorumlock.lock.hold.duration (histograms, seconds, by quorumlock.outcome),
// quorumlock.lock.extensions (a counter by outcome) and
// quorumlock.lock.waiters. Its error is the meter's, making an instrument.
func Hooks(opts ...Option) (redlock.Hooks, error) {
	cfg := config{}
	for _, opt := range opts {
		opt(&cfg)
	}
	if cfg.tp == nil {
		cfg.tp = otel.GetTracerProvider()
	}
	if cfg.mp == nil {
		cfg.mp = otel.GetMeterProvider()
	}
	meter := cfg.mp.Meter(scope)
	h := &hooks{tracer: cfg.tp.Tracer(scope), resources: cfg.resources}
	var err error
	if h.acquire, err = meter.Float64Histogram("quorumlock.lock.acquire.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a TryLock, Lock, TryLockAll or LockAll call took, its waits included, by outcome."),
		metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)); err != nil {
		return redlock.Hooks{}, err
	}
	if h.hold, err = meter.Float64Histogram("quorumlock.lock.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a lock was held, from its acquisition to its end on the holder's side, by how it ended."),
		metric.WithExplicitBucketBoundaries(0.001, 0.01, 0.1, 0.5, 1, 5, 15, 30, 60, 300, 900, 3600)); err != nil {
		return redlock.Hooks{}, err
	}
	if h.extends, err = meter.Int64Counter("quorumlock.lock.extensions", metric.WithUnit("{extension}"),
		metric.WithDescription("Extend calls, the renewer's included, by outcome.")); err != nil {
		return redlock.Hooks{}, err
	}
	if h.lost, err = meter.Int64Counter("quorumlock.lock.lost", metric.WithUnit("{lock}"),
		metric.WithDescription("Locks that ended before Unlock, by how (lease_ran_out, extend_failed, no_progress, max_hold).")); err != nil {
		return redlock.Hooks{}, err
	}
	if h.waiters, err = meter.Int64UpDownCounter("quorumlock.lock.waiters", metric.WithUnit("{call}"),
		metric.WithDescription("Lock and LockAll calls that wait: after a lost attempt, or queued behind a waiter of their own client.")); err != nil {
		return redlock.Hooks{}, err
	}
	return redlock.Hooks{
		Acquire: h.startAcquire,
		Attempt: h.attempt,
		Vote:    h.vote,
		Waiting: h.waiting,
		Wait:    h.startWait,
		Hold:    h.startHold,
		Extend:  h.startExtend,
		Release: h.startRelease,
	}, nil
}

func (h *hooks) start(ctx context.Context, name, resource string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if h.resources {
		opts = append(opts, trace.WithAttributes(keyResource.String(resource)))
	}
	return h.tracer.Start(ctx, name, opts...)
}

func (h *hooks) startAcquire(ctx context.Context, resource string) (context.Context, func(redlock.Event)) {
	caller := trace.SpanFromContext(ctx)
	ctx, span := h.start(ctx, "quorumlock.acquire", resource)
	return context.WithValue(ctx, callerKey{}, caller), func(e redlock.Event) {
		h.acquire.Record(ctx, e.Took.Seconds(), metric.WithAttributes(keyOutcome.String(e.Outcome)))
		span.SetAttributes(keyOutcome.String(e.Outcome), keyAttempts.Int(e.Attempts))
		if e.Err == nil {
			span.SetAttributes(keyValidity.Float64(e.Validity.Seconds()))
			if e.Fence != 0 {
				span.SetAttributes(keyFence.Int64(int64(e.Fence)))
			}
		}
		failed(span, e)
		span.End()
	}
}

// failed marks span failed for an outcome that is a fault: a lock that
// others hold, or a caller that gave up, is none.
func failed(span trace.Span, e redlock.Event) {
	switch e.Outcome {
	case "acquired", "not_acquired", "cancelled", "extended", "unlocked", "released":
		return
	}
	if e.Err != nil {
		span.RecordError(e.Err)
	}
	span.SetStatus(codes.Error, e.Outcome)
}

func (h *hooks) attempt(ctx context.Context, e redlock.Event) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{keyOutcome.String(e.Outcome), keyTook.Float64(e.Took.Seconds())}
	if e.Err == nil {
		attrs = append(attrs, keyValidity.Float64(e.Validity.Seconds()))
		if e.Fence != 0 {
			attrs = append(attrs, keyFence.Int64(int64(e.Fence)))
		}
	}
	span.AddEvent("quorumlock.attempt", trace.WithAttributes(attrs...))
}

// vote adds an event to the acquire span while it is open: a vote that
// comes after the attempt was decided may find it ended, and is dropped.
func (h *hooks) vote(ctx context.Context, e redlock.Event) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.AddEvent("quorumlock.vote", trace.WithAttributes(keyMaster.String(e.Master), keyOutcome.String(e.Outcome),
		keyTook.Float64(e.Took.Seconds())))
}

// waiting moves the waiters gauge; redlock tells it no context.
func (h *hooks) waiting(delta int) { h.waiters.Add(context.Background(), int64(delta)) }

// startWait is a span for one wait of a Lock call between its attempts, a
// child of its acquire span: outcome woke or ended, and whether a holder
// made it wait (the lost attempt's ErrNotAcquired) or a failure did. A
// wait is no fault: its span never fails.
func (h *hooks) startWait(ctx context.Context, resource string) func(redlock.Event) {
	_, span := h.start(ctx, "quorumlock.wait", resource)
	return func(e redlock.Event) {
		span.SetAttributes(keyOutcome.String(e.Outcome), keyHeld.Bool(errors.Is(e.Err, redlock.ErrNotAcquired)))
		span.End()
	}
}

func (h *hooks) startHold(ctx context.Context, resource string) func(redlock.Event) {
	link := trace.LinkFromContext(ctx)
	if caller, ok := ctx.Value(callerKey{}).(trace.Span); ok {
		ctx = trace.ContextWithSpan(ctx, caller)
	}
	ctx, span := h.start(ctx, "quorumlock.hold", resource, trace.WithLinks(link))
	return func(e redlock.Event) {
		h.hold.Record(ctx, e.Took.Seconds(), metric.WithAttributes(keyOutcome.String(e.Outcome)))
		if e.Outcome != "unlocked" {
			h.lost.Add(ctx, 1, metric.WithAttributes(keyOutcome.String(e.Outcome)))
		}
		span.SetAttributes(keyOutcome.String(e.Outcome), keyRenewed.Bool(e.Renewed))
		failed(span, e)
		span.End()
	}
}

func (h *hooks) startExtend(ctx context.Context, resource string) func(redlock.Event) {
	ctx, span := h.start(ctx, "quorumlock.extend", resource)
	return func(e redlock.Event) {
		h.extends.Add(ctx, 1, metric.WithAttributes(keyOutcome.String(e.Outcome)))
		span.SetAttributes(keyOutcome.String(e.Outcome))
		failed(span, e)
		span.End()
	}
}

// startRelease is a span for one Unlock, a child of the caller's span:
// its outcome; not_held (the lock had ended before Unlock) fails it.
func (h *hooks) startRelease(ctx context.Context, resource string) func(redlock.Event) {
	_, span := h.start(ctx, "quorumlock.release", resource)
	return func(e redlock.Event) {
		span.SetAttributes(keyOutcome.String(e.Outcome))
		failed(span, e)
		span.End()
	}
}
