package otelobserve_test

import (
	"context"
	"fmt"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/observe"
	"github.com/limitkit/limitkit/backend/observe/otelobserve"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
)

func Example() {
	// In a service: otelobserve.New(otel.GetMeterProvider()), with an
	// exporter (OTLP, Prometheus) on the SDK's MeterProvider.
	reader := sdkmetric.NewManualReader()
	metrics, err := otelobserve.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		panic(err)
	}
	mem, _ := memorystore.New()
	fake := clock.NewFake(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	lim, _ := limiter.New(observe.Wrap(mem, metrics.Observer()), limiter.Config{Limit: 2, Window: time.Minute, Prefix: "api:"},
		limiter.WithClock(fake))
	for range 3 {
		_, _ = lim.Allow(context.Background(), "alice")
	}

	var rm metricdata.ResourceMetrics
	_ = reader.Collect(context.Background(), &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "limitkit.decisions" {
			for _, p := range sum.DataPoints {
				outcome, _ := p.Attributes.Value("outcome")
				if outcome.AsString() == "allowed" {
					fmt.Println("allowed:", p.Value)
				}
			}
		}
	}
	// Output:
	// allowed: 2
}
