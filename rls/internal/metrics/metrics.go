// Package metrics exports the reference server's Prometheus metrics
// (envoyproxy/ratelimit with its default statsd mapper), under its names
// and labels, so that dashboards and alerts keep working after the swap:
//
//	ratelimit_service_rate_limit_total_hits{domain,key1,key2}    counter: hits asked for
//	ratelimit_service_rate_limit_over_limit{domain,key1,key2}    counter: hits past the limit
//	ratelimit_service_rate_limit_near_limit{domain,key1,key2}    counter: hits between NEAR_LIMIT_RATIO of the limit and the limit
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
// with detailed_metric or value_to_metric, and a limit override, put
// request values in them, so the labels are bounded in number and size:
// past MaxSeries label sets the others are counted under key1 "_other",
// and each label value is at most MaxLabelBytes bytes. The five rule
// metrics thus take at most 5 x (MaxSeries+1) series of 3 bounded labels:
// under 5 MB of /metrics whatever the requests carry.
//
// One difference is deliberate: a refused request consumes nothing here,
// so a limit that admitted a request another limit refused counts its hits
// in total_hits alone, neither within nor over.
package metrics

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"unicode/utf8"

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
		nearLimit:   rule("near_limit", "Hits between the near-limit ratio of the limit and the limit, by domain and rule."),
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

// Counts are one limit's part in one decision, in hits, as the
// reference's counters count them (rls.Stat's fields of the same names).
type Counts struct {
	Total, Over, Near, Within, Shadow uint64
}

// Record counts one limit's part in one decision. key is the rule's
// statistics key, "domain.key_value.key" (rls.Stat.Key): as the
// reference, it is sanitized as a whole (':' and '|' to '_', the dots of
// an IPv4 address to '_') and cut at its dots into domain, key1 and key2,
// each bounded to MaxLabelBytes. domain is used when key is empty.
func (m *Metrics) Record(domain, key string, c Counts) {
	if key == "" {
		key = domain
	}
	l := m.labelsOf(key)
	v := []string{l.domain, l.key1, l.key2}
	add := func(cv *prometheus.CounterVec, n uint64) {
		if n > 0 {
			cv.WithLabelValues(v...).Add(float64(n))
		}
	}
	m.totalHits.WithLabelValues(v...).Add(float64(c.Total))
	add(m.overLimit, c.Over)
	add(m.nearLimit, c.Near)
	add(m.withinLimit, c.Within)
	add(m.shadowMode, c.Shadow)
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

// labelsOf cuts a statistics key into the reference's labels, within
// MaxSeries and MaxLabelBytes.
func (m *Metrics) labelsOf(key string) labels {
	parts := strings.SplitN(sanitizeHead(key), ".", 4)
	l := labels{domain: bound(parts[0])}
	if len(parts) > 1 {
		l.key1 = bound(parts[1])
	}
	if len(parts) > 2 {
		l.key2 = bound(parts[2])
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

// MaxLabelBytes bounds each label value. A longer value (request values
// under detailed_metric or a limit override can be megabytes) keeps its
// first bytes and ends in "~" and 16 hex digits of its SHA-256, so that
// distinct values stay distinct and one value always maps to one label.
const MaxLabelBytes = 128

// bound applies MaxLabelBytes.
func bound(s string) string {
	if len(s) <= MaxLabelBytes {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	keep := MaxLabelBytes - 17
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + "~" + hex.EncodeToString(sum[:8])
}

// ipv4 is the reference's pattern of an IPv4 address in a stat name.
var ipv4 = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)

var statNameReplacer = strings.NewReplacer(":", "_", "|", "_")

// sanitizeHead sanitizes the first sanitizedBytes of s (the bytes that can
// reach a label unhashed, with room to spare) and leaves the rest, which
// only feeds a hash, as it is: hostile megabyte values cost no regexp
// scan.
func sanitizeHead(s string) string {
	if len(s) <= sanitizedBytes {
		return sanitize(s)
	}
	return sanitize(s[:sanitizedBytes]) + s[sanitizedBytes:]
}

// sanitizedBytes bounds the part of a key sanitizeHead scans.
const sanitizedBytes = 1024

// sanitize is the reference's SanitizeStatName: ':' and '|' become '_',
// and so do the dots of anything shaped as an IPv4 address, so that an
// address stays one label ("remote_address_10_0_0_1").
func sanitize(s string) string {
	return ipv4.ReplaceAllStringFunc(statNameReplacer.Replace(s), func(ip string) string {
		return strings.ReplaceAll(ip, ".", "_")
	})
}
