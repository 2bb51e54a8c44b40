package otelobserve

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/limitkit/limitkit/limiter/adaptive"
)

// AdaptiveMetrics are OpenTelemetry instruments for limiter/adaptive's
// concurrency limits, with the names and attributes of promobserve's
// NewAdaptive:
//
//	limitkit.adaptive.decisions   counter {request}  limiter, priority, outcome (admitted, queued, rejected, shed, expired, canceled)
//	limitkit.adaptive.limit       gauge {request}    limiter: the limit in force
//	limitkit.adaptive.in_flight   gauge {request}    limiter: requests holding a slot
//	limitkit.adaptive.latency     histogram s        limiter, result (success, dropped, ignored): the latency measured
//	limitkit.adaptive.window_rtt  gauge s            limiter: the mean latency of the last sampling window
//
// Cardinality is the number of limiters (each names itself with
// adaptive.Config.Name) times three priorities and six outcomes.
type AdaptiveMetrics struct {
	decisions metric.Int64Counter
	limit     metric.Int64Gauge
	inflight  metric.Int64Gauge
	latency   metric.Float64Histogram
	rtt       metric.Float64Gauge

	attrs sync.Map // adaptiveAttrKey → metric.MeasurementOption, built once each
}

// AdaptiveBuckets are the latency histogram's bucket boundaries, in
// seconds, as promobserve's: a service's request latencies, 1 ms to 10 s.
var AdaptiveBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10}

// NewAdaptive makes the instruments with a meter of mp. It fails for a nil
// mp or a meter that refuses an instrument.
func NewAdaptive(mp metric.MeterProvider) (*AdaptiveMetrics, error) {
	if mp == nil {
		return nil, errors.New("otelobserve: meter provider is nil; pass otel.GetMeterProvider() or an SDK MeterProvider")
	}
	meter := mp.Meter(ScopeName)
	m := &AdaptiveMetrics{}
	var errs [5]error
	m.decisions, errs[0] = meter.Int64Counter("limitkit.adaptive.decisions", metric.WithUnit("{request}"),
		metric.WithDescription("Adaptive concurrency decisions, by limiter, priority and outcome."))
	m.limit, errs[1] = meter.Int64Gauge("limitkit.adaptive.limit", metric.WithUnit("{request}"),
		metric.WithDescription("The adaptive concurrency limit in force."))
	m.inflight, errs[2] = meter.Int64Gauge("limitkit.adaptive.in_flight", metric.WithUnit("{request}"),
		metric.WithDescription("Requests holding a slot of the adaptive limit."))
	m.latency, errs[3] = meter.Float64Histogram("limitkit.adaptive.latency", metric.WithUnit("s"),
		metric.WithDescription("Latency the adaptive limiter measured, by how the request ended."),
		metric.WithExplicitBucketBoundaries(AdaptiveBuckets...))
	m.rtt, errs[4] = meter.Float64Gauge("limitkit.adaptive.window_rtt", metric.WithUnit("s"),
		metric.WithDescription("Mean latency of the adaptive limiter's last sampling window."))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, fmt.Errorf("otelobserve: make adaptive instruments: %w", err)
	}
	return m, nil
}

type adaptiveAttrKey struct{ limiter, priority, outcome, result string }

// set returns the attributes for k, made once: a decision under overload
// must not allocate them again.
func (m *AdaptiveMetrics) set(k adaptiveAttrKey) metric.MeasurementOption {
	if o, ok := m.attrs.Load(k); ok {
		return o.(metric.MeasurementOption)
	}
	kv := []attribute.KeyValue{attribute.String("limiter", k.limiter)}
	if k.priority != "" {
		kv = append(kv, attribute.String("priority", k.priority), attribute.String("outcome", k.outcome))
	}
	if k.result != "" {
		kv = append(kv, attribute.String("result", k.result))
	}
	o, _ := m.attrs.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(kv...)))
	return o.(metric.MeasurementOption)
}

// Observer returns the adaptive.Observer that feeds the metrics; set it as
// adaptive.Config.Observer (adaptive.Join it with adaptive.Slog).
func (m *AdaptiveMetrics) Observer() adaptive.Observer {
	return adaptive.Observer{
		OnDecision: func(ctx context.Context, d adaptive.Decision) {
			m.decisions.Add(ctx, 1, m.set(adaptiveAttrKey{limiter: d.Limiter, priority: d.Priority.String(), outcome: string(d.Outcome)}))
			lim := m.set(adaptiveAttrKey{limiter: d.Limiter})
			m.inflight.Record(ctx, int64(d.InFlight), lim)
			m.limit.Record(ctx, int64(d.Limit), lim)
		},
		OnRelease: func(ctx context.Context, r adaptive.Release) {
			m.latency.Record(ctx, r.Latency.Seconds(), m.set(adaptiveAttrKey{limiter: r.Limiter, result: string(r.Result)}))
		},
		OnLimit: func(c adaptive.LimitChange) {
			ctx := context.Background()
			lim := m.set(adaptiveAttrKey{limiter: c.Limiter})
			m.limit.Record(ctx, int64(c.To), lim)
			if c.Window.RTT > 0 {
				m.rtt.Record(ctx, c.Window.RTT.Seconds(), lim)
			}
		},
	}
}
