package promobserve

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitkit/limitkit/limiter/adaptive"
)

// AdaptiveMetrics holds the Prometheus collectors of adaptive limiters
// (limiter/adaptive). Build it with NewAdaptive; it is safe for concurrent
// use. The metrics (limiter is Config.Name, priority critical, default or
// sheddable):
//
//	limitkit_adaptive_decisions_total{limiter,priority,outcome}  counter: Acquire calls, by outcome
//	                                                             (admitted, queued, rejected, shed,
//	                                                             expired, canceled)
//	limitkit_adaptive_limit{limiter}                             gauge: the limit in force
//	limitkit_adaptive_in_flight{limiter}                         gauge: requests holding a slot
//	limitkit_adaptive_latency_seconds{limiter,result}            histogram: measured latency of
//	                                                             released requests (success, dropped,
//	                                                             ignored)
//	limitkit_adaptive_window_rtt_seconds{limiter}                gauge: the last window's mean latency
type AdaptiveMetrics struct {
	decisions *prometheus.CounterVec
	limit     *prometheus.GaugeVec
	inflight  *prometheus.GaugeVec
	latency   *prometheus.HistogramVec
	rtt       *prometheus.GaugeVec
}

// AdaptiveBuckets are the latency histogram's buckets, in seconds: a
// service's request latencies, 1 ms to 10 s.
var AdaptiveBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10}

// NewAdaptive creates the collectors and registers them with reg. It
// fails when reg is nil or already holds them.
func NewAdaptive(reg prometheus.Registerer) (*AdaptiveMetrics, error) {
	if reg == nil {
		return nil, errors.New("promobserve: registerer is nil; pass prometheus.DefaultRegisterer or a prometheus.NewRegistry()")
	}
	m := &AdaptiveMetrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "limitkit_adaptive_decisions_total",
			Help: "Adaptive concurrency decisions, by limiter, priority and outcome.",
		}, []string{"limiter", "priority", "outcome"}),
		limit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "limitkit_adaptive_limit",
			Help: "The adaptive concurrency limit in force.",
		}, []string{"limiter"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "limitkit_adaptive_in_flight",
			Help: "Requests holding a slot of the adaptive limit.",
		}, []string{"limiter"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "limitkit_adaptive_latency_seconds",
			Help:    "Latency the adaptive limiter measured, by how the request ended.",
			Buckets: AdaptiveBuckets,
		}, []string{"limiter", "result"}),
		rtt: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "limitkit_adaptive_window_rtt_seconds",
			Help: "Mean latency of the adaptive limiter's last sampling window.",
		}, []string{"limiter"}),
	}
	for _, c := range []prometheus.Collector{m.decisions, m.limit, m.inflight, m.latency, m.rtt} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("promobserve: registering the adaptive metrics: %w", err)
		}
	}
	return m, nil
}

// Observer returns the adaptive.Observer that feeds the metrics; set it as
// adaptive.Config.Observer (adaptive.Join it with adaptive.Slog).
func (m *AdaptiveMetrics) Observer() adaptive.Observer {
	return adaptive.Observer{
		OnDecision: func(_ context.Context, d adaptive.Decision) {
			m.decisions.WithLabelValues(d.Limiter, d.Priority.String(), string(d.Outcome)).Inc()
			m.inflight.WithLabelValues(d.Limiter).Set(float64(d.InFlight))
			m.limit.WithLabelValues(d.Limiter).Set(float64(d.Limit))
		},
		OnRelease: func(_ context.Context, r adaptive.Release) {
			m.latency.WithLabelValues(r.Limiter, string(r.Result)).Observe(r.Latency.Seconds())
		},
		OnLimit: func(c adaptive.LimitChange) {
			m.limit.WithLabelValues(c.Limiter).Set(float64(c.To))
			if c.Window.RTT > 0 {
				m.rtt.WithLabelValues(c.Limiter).Set(c.Window.RTT.Seconds())
			}
		},
	}
}
