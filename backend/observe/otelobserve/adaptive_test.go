package otelobserve_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/limitkit/limitkit/backend/observe/otelobserve"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter/adaptive"
)

func TestAdaptiveMetrics(t *testing.T) {
	_, err := otelobserve.NewAdaptive(nil)
	require.Error(t, err)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := otelobserve.NewAdaptive(mp)
	require.NoError(t, err)
	fake := clock.NewFake(time.Unix(0, 0))
	lim, err := adaptive.New(adaptive.Config{Name: "api", Law: adaptive.Fixed{}, Initial: 2, MinSamples: 1,
		Window: time.Nanosecond, Clock: fake, Observer: m.Observer()})
	require.NoError(t, err)
	ctx := context.Background()
	a, err := lim.Acquire(ctx, adaptive.Critical)
	require.NoError(t, err)
	b, err := lim.Acquire(ctx, adaptive.Critical)
	require.NoError(t, err)
	_, err = lim.Acquire(ctx, adaptive.Sheddable)
	require.ErrorIs(t, err, adaptive.ErrLimited)
	fake.Advance(20 * time.Millisecond)
	a.OnSuccess()
	b.OnDropped()

	got := collect(t, reader)
	want := map[string]float64{
		"limitkit.adaptive.decisions{limiter=api,outcome=admitted,priority=critical}":  2,
		"limitkit.adaptive.decisions{limiter=api,outcome=rejected,priority=sheddable}": 1,
		"limitkit.adaptive.limit{limiter=api}":                                         2,
		"limitkit.adaptive.in_flight{limiter=api}":                                     2,
		"limitkit.adaptive.latency{limiter=api,result=success}":                        1, // a histogram's count
		"limitkit.adaptive.latency{limiter=api,result=dropped}":                        1,
		"limitkit.adaptive.window_rtt{limiter=api}":                                    0.02,
	}
	for name, v := range want {
		s, ok := got[name]
		require.True(t, ok, "no %s in %v", name, got)
		require.InDelta(t, v, s.value, 1e-9, name)
	}
	require.Len(t, got, len(want), "only the series above: %v", got)
	require.InDelta(t, 0.02, got["limitkit.adaptive.latency{limiter=api,result=success}"].sum, 1e-9)
}
