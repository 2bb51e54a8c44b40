package otelobserve_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/limitkit/limitkit/backend/observe"
	"github.com/limitkit/limitkit/backend/observe/otelobserve"
)

// BenchmarkDecision is what the observer adds to each decision: a counter
// add and a histogram record on the SDK, attributes precomputed.
func BenchmarkDecision(b *testing.B) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	m, err := otelobserve.New(mp)
	if err != nil {
		b.Fatal(err)
	}
	on := m.Observer().OnDecision
	ctx := context.Background()
	d := observe.Decision{Op: observe.Take, Policy: "api:", Allowed: true, Cost: 1, Latency: 300 * time.Microsecond}
	b.ReportAllocs()
	for b.Loop() {
		on(ctx, d)
	}
}
