// Package promobserve exports limitkit's observations as Prometheus metrics
// (github.com/prometheus/client_golang).
//
// Wiring takes a few lines:
//
//	metrics, err := promobserve.New(prometheus.DefaultRegisterer)
//	if err != nil { ... }
//	guard, _ := fallback.New(redisStore, fallback.WithStateHook(metrics.BreakerHook("redis")))
//	lim, _ := limiter.New(observe.Wrap(guard, metrics.Observer()), cfg)
//	_ = metrics.WatchMemoryStore("local", memStore) // optional: a memory store's evictions
//	http.Handle("/metrics", promhttp.Handler())
//
// The metrics (policy is the limit's key prefix; outcome is "allowed",
// "denied", "shadow_denied" for a limit in shadow mode, or "error"):
//
//	limitkit_decisions_total{policy,outcome}           counter: Take and TakeAll calls
//	limitkit_degraded_decisions_total{policy,outcome}  counter: those decided by a fallback policy
//	limitkit_cached_denials_total{policy}              counter: denials a deny cache answered without a store call
//	limitkit_decision_duration_seconds{policy}         histogram: their latency, errors included
//	limitkit_breaker_state{breaker,state}              gauge: 1 for the breaker's current state
//	                                                   ("closed", "half-open", "open"), 0 for the others;
//	                                                   on a Redis Cluster the worst of its nodes' (as
//	                                                   fallback's State)
//	limitkit_breaker_node_state{breaker,node,state}    gauge: the same for each Redis Cluster node's
//	                                                   breaker (node: its address, StateChange.Node)
//	limitkit_breaker_transitions_total{breaker,to}     counter: state changes
//	limitkit_memorystore_active_evictions_total{store} counter: keys evicted inside their window
//	limitkit_memorystore_keys{store}                   gauge: keys held
//	limitkit_leases_acquired_total{policy}             counter: concurrency leases granted
//	limitkit_leases_denied_total{policy}               counter: concurrency leases refused
//	limitkit_leases_released_total{policy}             counter: leases given back while held
//	limitkit_leases_expired_total{policy}              counter: leases a Release or Renew found expired
//	                                                   (the holder worked past the lease timeout)
//	limitkit_leases_held{policy}                       gauge: acquired - released - expired, by this process
//
// The held gauge counts what this process saw: a lease released by another
// process (by id) lowers that process's gauge, so sum it over processes; a
// lease whose holder crashed stays counted until the process restarts.
//
// Peek and Reset are not decisions and are not counted. Key prefixes are
// few (one per limit), so the policy label stays small; do not put user
// data in prefixes.
package promobserve

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/observe"
)

// DefaultBuckets are the latency histogram's buckets, in seconds: from
// 100 µs (a memory store decides in well under that) through Redis round
// trips (a fraction of a millisecond to a few) to the fallback store's
// default deadline of 100 ms and beyond.
var DefaultBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}

// Metrics holds limitkit's Prometheus collectors. Build it with New; it is
// safe for concurrent use.
type Metrics struct {
	decisions   *prometheus.CounterVec
	degraded    *prometheus.CounterVec
	cached      *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	breaker     *prometheus.GaugeVec
	nodeBreaker *prometheus.GaugeVec
	transitions *prometheus.CounterVec
	stores      *storeCollector
	leases      leaseMetrics
	obs         observe.Observer

	// nodes holds each named breaker's node states, for the worst of them.
	mu    sync.Mutex
	nodes map[string]map[string]backend.BreakerState
}

// New creates the collectors and registers them with reg, such as
// prometheus.DefaultRegisterer or a prometheus.NewRegistry(). It fails when
// reg is nil or already holds limitkit's metrics.
func New(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("promobserve: registerer is nil; pass prometheus.DefaultRegisterer or a prometheus.NewRegistry()")
	}
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "limitkit_decisions_total",
			Help: "Rate limit decisions, by policy (key prefix) and outcome (allowed, denied, shadow_denied, error).",
		}, []string{"policy", "outcome"}),
		degraded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "limitkit_degraded_decisions_total",
			Help: "Decisions made by a fallback policy while the primary store was unavailable, by policy and outcome.",
		}, []string{"policy", "outcome"}),
		cached: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "limitkit_cached_denials_total",
			Help: "Denials a deny cache (backend/denycache) answered without a store call, by policy.",
		}, []string{"policy"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "limitkit_decision_duration_seconds",
			Help:    "Time the store took to decide, errors included, by policy.",
			Buckets: DefaultBuckets,
		}, []string{"policy"}),
		breaker: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "limitkit_breaker_state",
			Help: "1 for the circuit breaker's current state (closed, half-open, open), 0 for the others.",
		}, []string{"breaker", "state"}),
		nodeBreaker: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "limitkit_breaker_node_state",
			Help: "1 for a Redis Cluster node's circuit breaker's current state (closed, half-open, open), 0 for the others.",
		}, []string{"breaker", "node", "state"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "limitkit_breaker_transitions_total",
			Help: "Circuit breaker state changes, by the state entered.",
		}, []string{"breaker", "to"}),
		stores: newStoreCollector(),
		nodes:  map[string]map[string]backend.BreakerState{},
		leases: newLeaseMetrics(),
	}
	for _, c := range []prometheus.Collector{m.decisions, m.degraded, m.cached, m.latency, m.breaker, m.nodeBreaker, m.transitions, m.stores,
		m.leases.acquired, m.leases.denied, m.leases.released, m.leases.expired, m.leases.held} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("promobserve: register limitkit metrics: %w", err)
		}
	}
	m.obs = observe.Observer{OnDecision: m.decision, OnBreakerChange: m.breakerChange}
	return m, nil
}

// Observer returns the observer that feeds the metrics; pass it to
// observe.Wrap (and observe.Join it with others if you like).
func (m *Metrics) Observer() observe.Observer { return m.obs }

// BreakerHook returns a func for fallback.WithStateHook that tracks the
// breaker's state under name. The breaker is reported closed from this call
// on, as a new fallback store's is, so call it once per breaker, when
// creating it.
func (m *Metrics) BreakerHook(name string) func(backend.StateChange) {
	m.mu.Lock()
	delete(m.nodes, name)
	m.setState(m.breaker, []string{name}, backend.BreakerClosed)
	m.mu.Unlock()
	return m.obs.BreakerHook(name)
}

// WatchMemoryStore exports s's key count and active evictions under name,
// read from s.Stats() at each scrape. Names must be unique.
func (m *Metrics) WatchMemoryStore(name string, s *memorystore.Store) error {
	if s == nil {
		return errors.New("promobserve: memory store is nil")
	}
	return m.stores.add(name, s)
}

func (m *Metrics) decision(_ context.Context, d observe.Decision) {
	if d.Lease != observe.NoLease {
		m.leases.record(d)
	}
	if d.Op != observe.Take && d.Op != observe.TakeAll {
		return
	}
	outcome := d.Outcome()
	m.decisions.WithLabelValues(d.Policy, outcome).Inc()
	if d.Degraded {
		m.degraded.WithLabelValues(d.Policy, outcome).Inc()
	}
	if d.Cached {
		m.cached.WithLabelValues(d.Policy).Inc()
	}
	m.latency.WithLabelValues(d.Policy).Observe(d.Latency.Seconds())
}

// breakerChange records a change of a store's only breaker (Node "") or of
// one cluster node's; the store's gauge shows the worst of its breakers.
// A node breaker fallback forgets is reported closing first, so the gauges
// never keep a forgotten node open.
func (m *Metrics) breakerChange(c observe.BreakerChange) {
	m.transitions.WithLabelValues(c.Breaker, string(c.To)).Inc()
	m.mu.Lock()
	defer m.mu.Unlock()
	nodes := m.nodes[c.Breaker]
	if nodes == nil {
		nodes = map[string]backend.BreakerState{}
		m.nodes[c.Breaker] = nodes
	}
	nodes[c.Node] = c.To
	if c.Node != "" {
		m.setState(m.nodeBreaker, []string{c.Breaker, c.Node}, c.To)
	}
	worst := backend.BreakerClosed
	for _, st := range nodes {
		if severity(st) > severity(worst) {
			worst = st
		}
	}
	m.setState(m.breaker, []string{c.Breaker}, worst)
}

// states are the breaker states, least severe first.
var states = []backend.BreakerState{backend.BreakerClosed, backend.BreakerHalfOpen, backend.BreakerOpen}

func severity(s backend.BreakerState) int { return slices.Index(states, s) }

// setState sets the gauge of labels (and each state) to 1 for to, 0 for
// the others.
func (m *Metrics) setState(g *prometheus.GaugeVec, labels []string, to backend.BreakerState) {
	for _, s := range states {
		v := 0.0
		if s == to {
			v = 1
		}
		g.WithLabelValues(append(labels, string(s))...).Set(v)
	}
}

// storeCollector reads memory stores' statistics at scrape time.
type storeCollector struct {
	evictions, keys *prometheus.Desc

	mu     sync.Mutex
	names  []string
	stores map[string]*memorystore.Store
}

func newStoreCollector() *storeCollector {
	return &storeCollector{
		evictions: prometheus.NewDesc("limitkit_memorystore_active_evictions_total",
			"Keys a memory store evicted while still inside their window (each got its full allowance back); a steady rise means MaxKeys is too low.",
			[]string{"store"}, nil),
		keys: prometheus.NewDesc("limitkit_memorystore_keys",
			"Keys a memory store holds, expired ones not yet reclaimed included.",
			[]string{"store"}, nil),
		stores: map[string]*memorystore.Store{},
	}
}

func (c *storeCollector) add(name string, s *memorystore.Store) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, dup := c.stores[name]; dup {
		return fmt.Errorf("promobserve: a memory store named %q is already watched; give each its own name", name)
	}
	c.stores[name] = s
	c.names = append(c.names, name)
	return nil
}

// Describe implements prometheus.Collector.
func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.evictions
	ch <- c.keys
}

// Collect implements prometheus.Collector: it reads each store's Stats.
func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	names := append([]string(nil), c.names...)
	stores := make([]*memorystore.Store, len(names))
	for i, n := range names {
		stores[i] = c.stores[n]
	}
	c.mu.Unlock()
	for i, s := range stores {
		st := s.Stats()
		ch <- prometheus.MustNewConstMetric(c.evictions, prometheus.CounterValue, float64(st.ActiveEvictions), names[i])
		ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(st.Keys), names[i])
	}
}

// leaseMetrics are the concurrency lease metrics.
type leaseMetrics struct {
	acquired, denied, released, expired *prometheus.CounterVec
	held                                *prometheus.GaugeVec
}

func newLeaseMetrics() leaseMetrics {
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"policy"})
	}
	return leaseMetrics{
		acquired: counter("limitkit_leases_acquired_total", "Concurrency leases granted, by policy (key prefix)."),
		denied:   counter("limitkit_leases_denied_total", "Concurrency leases refused (every slot held), by policy."),
		released: counter("limitkit_leases_released_total", "Concurrency leases given back while still held, by policy."),
		expired: counter("limitkit_leases_expired_total",
			"Concurrency leases a Release or Renew found no longer held: the holder worked past the lease timeout, by policy."),
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "limitkit_leases_held",
			Help: "Concurrency leases held as this process saw them (acquired - released - expired), by policy."}, []string{"policy"}),
	}
}

func (l *leaseMetrics) record(d observe.Decision) {
	p := d.LeasePolicy
	switch d.Lease {
	case observe.LeaseAcquired:
		l.acquired.WithLabelValues(p).Inc()
		l.held.WithLabelValues(p).Inc()
	case observe.LeaseDenied:
		l.denied.WithLabelValues(p).Inc()
	case observe.LeaseReleased:
		l.released.WithLabelValues(p).Inc()
		l.held.WithLabelValues(p).Dec()
	case observe.LeaseExpired:
		l.expired.WithLabelValues(p).Inc()
		l.held.WithLabelValues(p).Dec()
	}
}
