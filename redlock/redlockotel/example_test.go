package redlockotel_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"quorumlock.dev/driver"
	"quorumlock.dev/driver/goredis"
	"quorumlock.dev/redlock"
	"quorumlock.dev/redlock/redlockotel"
)

// newTracedClient returns a client whose acquisitions, holds and extensions are spans and
// measurements of the global OpenTelemetry providers (otel.SetTracerProvider and
// otel.SetMeterProvider at start-up).
func newTracedClient(masters []driver.Conn) (*redlock.Client, error) {
	hooks, err := redlockotel.Hooks()
	if err != nil {
		return nil, err
	}
	return redlock.New(masters, redlock.WithHooks(hooks))
}

// The spans of one acquisition, in the trace of the request that made it.
func Example() {
	spans := tracetest.NewSpanRecorder()
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)))
	defer otel.SetTracerProvider(prev)
	var masters []driver.Conn
	for range 3 {
		s := miniredis.NewMiniRedis()
		if err := s.Start(); err != nil {
			log.Fatal(err)
		}
		defer s.Close()
		masters = append(masters, goredis.Conn(redis.NewClient(&redis.Options{Addr: s.Addr()})))
	}
	client, err := newTracedClient(masters)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	ctx, request := otel.Tracer("app").Start(context.Background(), "request")
	lock, err := client.TryLock(ctx, "orders:42", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	_ = lock.Unlock(ctx)
	request.End()

	names := map[[8]byte]string{}
	for _, s := range spans.Ended() {
		names[s.SpanContext().SpanID()] = s.Name()
	}
	for _, s := range spans.Ended() {
		fmt.Printf("%s, child of %q", s.Name(), names[s.Parent().SpanID()])
		for _, l := range s.Links() {
			fmt.Printf(", linked to %q", names[l.SpanContext.SpanID()])
		}
		fmt.Println()
	}
	// Output:
	// quorumlock.acquire, child of "request"
	// quorumlock.hold, child of "request", linked to "quorumlock.acquire"
	// quorumlock.release, child of "request"
	// request, child of ""
}
