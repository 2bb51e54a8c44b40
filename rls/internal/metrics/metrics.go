// Package metrics exports the reference server's Prometheus metrics
// (envoyproxy/ratelimit with its default statsd mapper), under its names
// and labels, so that dashboards and alerts keep working after the swap:
//
//	ratelimit_service_rate_limit_total_hits{domain,key1,key2}    counter: hits asked for
//	ratelimit_service_rate_limit_over_limit{domain,key1,key2}    counter: hits refused
//	ratelimit_service_rate_limit_near_limit{domain,key1,key2}    counter: hits admitted above NEAR_LIMIT_RATIO of the limit
//	ratelimit_service_rate_limit_within_limit{domain,key1,key2}  counter: hits admitted
//	ratelimit_service_rate_limit_shadow_mode{domain,key1,key2}   counter: hits refused but admitted by shadow mode
//	ratelimit_service_config_load_success                        counter: configurations loaded
//	ratelimit_service_config_load_error                          counter: configurations refused (the last good one kept)
//	ratelimit_service_should_rate_limit_error{err_type}          counter: calls answered with an error
//	ratelimit_service_total_requests{grpc_method}                counter: gRPC calls
//	ratelimit_service_response_time_seconds{grpc_method}         histogram: their latency
//	limitkit_rls_calls_in_flight                                 gauge: gRPC calls being answered (limitkit's)
//
// key1 and key2 are the first two levels of the rule's key below the
// domain ("key_value" or "key"), as the reference's mapper cuts them; deeper
// levels are dropped. Rule keys come from the configuration, but a rule
// with detailed_metric puts request values in them, so the label sets are
// bounded: past MaxSeries the others are counted under key1 "_other".
//
// One difference is deliberate: a refused request consumes nothing here,
// so a limit that admitted a request another limit refused counts its hits
// in total_hits alone, neither within nor over.
package metrics

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// MaxSeries bounds the distinct (domain, key1, key2) label sets.
const MaxSeries = 2000

// otherKey stands for the label sets past MaxSeries.
const otherKey = "_other"

// Metrics holds the collectors. It is safe for concurrent use.
type Metrics struct {
	totalHits   *prometheus.CounterVec
	overLimit   *prometheus.CounterVec
	nearLimit   *prometheus.CounterVec
	withinLimit *prometheus.CounterVec
	shadowMode  *prometheus.CounterVec
	loadOK      prometheus.Counter
	loadError   prometheus.Counter
	callErrors  *prometheus.CounterVec
	requests    *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	inFlight    prometheus.Gauge

	mu     sync.Mutex
	series map[labels]struct{}
}

type labels struct{ domain, key1, key2 string }

// New registers the collectors with reg.
func New(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("metrics: registerer is nil")
	}
	rule := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimit_service_rate_limit_" + name, Help: help},
			[]string{"domain", "key1", "key2"})
	}
	m := &Metrics{
		totalHits:   rule("total_hits", "Hits asked for, by domain and rule."),
		overLimit:   rule("over_limit", "Hits refused, by domain and rule."),
		nearLimit:   rule("near_limit", "Hits admitted above the near-limit ratio of the limit, by domain and rule."),
		withinLimit: rule("within_limit", "Hits admitted, by domain and rule."),
		shadowMode:  rule("shadow_mode", "Hits over the limit admitted by shadow mode, by domain and rule."),
		loadOK: prometheus.NewCounter(prometheus.CounterOpts{Name: "ratelimit_service_config_load_success",
			Help: "Rate limit configurations loaded."}),
		loadError: prometheus.NewCounter(prometheus.CounterOpts{Name: "ratelimit_service_config_load_error",
			Help: "Rate limit configurations refused; the last good one stays in force."}),
		callErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimit_service_should_rate_limit_error",
			Help: "ShouldRateLimit calls answered with an error, by err_type (redis_error, service_error)."}, []string{"err_type"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimit_service_total_requests",
			Help: "gRPC calls, by method."}, []string{"grpc_method"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ratelimit_service_response_time_seconds",
			Help:    "gRPC call latency, by method.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .02, .05, .1, .25, 1}}, []string{"grpc_method"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "limitkit_rls_calls_in_flight",
			Help: "gRPC calls being answered."}),
		series: map[labels]struct{}{},
	}
	for _, c := range []prometheus.Collector{m.totalHits, m.overLimit, m.nearLimit, m.withinLimit, m.shadowMode,
		m.loadOK, m.loadError, m.callErrors, m.requests, m.latency, m.inFlight} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: register: %w", err)
		}
	}
	return m, nil
}

// Record counts one limit's part in one decision. key is the rule's
// statistics key, "domain.key_value.key" (rls.Stat.Key); outcome is
// rls.Outcome's name: within_limit, near_limit (admitted, and counted as
// within_limit too), over_limit, shadow_mode (refused but admitted: counted
// as over_limit too, as the reference does) or held (this limit admitted
// but another refused the request, so nothing was consumed: only
// total_hits counts it).
func (m *Metrics) Record(domain, key, outcome string, hits uint64) {
	l := m.labelsOf(domain, strings.TrimPrefix(key, domain+"."))
	v := []string{l.domain, l.key1, l.key2}
	n := float64(hits)
	m.totalHits.WithLabelValues(v...).Add(n)
	switch outcome {
	case "within_limit":
		m.withinLimit.WithLabelValues(v...).Add(n)
	case "near_limit":
		m.withinLimit.WithLabelValues(v...).Add(n)
		m.nearLimit.WithLabelValues(v...).Add(n)
	case "over_limit":
		m.overLimit.WithLabelValues(v...).Add(n)
	case "shadow_mode":
		m.overLimit.WithLabelValues(v...).Add(n)
		m.shadowMode.WithLabelValues(v...).Add(n)
	}
}

// ConfigLoaded counts a configuration load, good or refused.
func (m *Metrics) ConfigLoaded(ok bool) {
	if ok {
		m.loadOK.Inc()
	} else {
		m.loadError.Inc()
	}
}

// CallError counts a ShouldRateLimit call answered with an error.
func (m *Metrics) CallError(errType string) { m.callErrors.WithLabelValues(errType).Inc() }

// Request counts a gRPC call and its latency in seconds.
func (m *Metrics) Request(method string, seconds float64) {
	m.requests.WithLabelValues(method).Inc()
	m.latency.WithLabelValues(method).Observe(seconds)
}

// CallStarted counts a gRPC call in flight until CallDone.
func (m *Metrics) CallStarted() { m.inFlight.Inc() }

// CallDone ends a CallStarted.
func (m *Metrics) CallDone() { m.inFlight.Dec() }

// labelsOf cuts rule into the reference's labels, within MaxSeries.
func (m *Metrics) labelsOf(domain, rule string) labels {
	l := labels{domain: sanitize(domain)}
	parts := strings.SplitN(rule, ".", 3)
	l.key1 = sanitize(parts[0])
	if len(parts) > 1 {
		l.key2 = sanitize(parts[1])
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.series[l]; ok {
		return l
	}
	if len(m.series) >= MaxSeries {
		return labels{domain: l.domain, key1: otherKey}
	}
	m.series[l] = struct{}{}
	return l
}

// sanitize replaces what statsd names cannot hold, as the reference's
// SanitizeStatName does.
func sanitize(s string) string {
	return strings.NewReplacer(":", "_", "|", "_").Replace(s)
}
