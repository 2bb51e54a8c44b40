// Package otelobserve exports limitkit's observations as OpenTelemetry
// metrics (go.opentelemetry.io/otel), beside backend/observe/promobserve.
// It is a module of its own, so limitkit's core never requires
// OpenTelemetry.
//
//	metrics, err := otelobserve.New(otel.GetMeterProvider())
//	if err != nil { ... }
//	guard, _ := fallback.New(redisStore, fallback.WithStateHook(metrics.BreakerHook("redis")))
//	lim, _ := limiter.New(observe.Wrap(guard, metrics.Observer()), cfg)
//	_ = metrics.WatchMemoryStore("local", memStore) // optional: a memory store's evictions
//
// The instruments (attribute names match promobserve's labels, so one
// dashboard reads both):
//
//	limitkit.decisions                    counter {decision}  policy, outcome (allowed, denied, shadow_denied, error), degraded (bool)
//	limitkit.cached_denials               counter {decision}  policy: denials a deny cache answered without a store call
//	limitkit.decision.duration            histogram s         policy: the store call's latency, errors included
//	limitkit.breaker.state                gauge               breaker, state: 1 for the current state, 0 for the others
//	limitkit.breaker.transitions          counter             breaker, to
//	limitkit.memorystore.active_evictions counter (async)     store: keys evicted inside their window
//	limitkit.memorystore.keys             gauge               store: keys held
//	limitkit.leases.acquired              counter {lease}     policy: concurrency leases granted
//	limitkit.leases.denied                counter {lease}     policy: concurrency leases refused
//	limitkit.leases.released              counter {lease}     policy: leases given back while held
//	limitkit.leases.expired               counter {lease}     policy: leases a Release or Renew found expired
//	limitkit.leases.held                  updowncounter       policy: acquired - released - expired, by this process
//
// The held count is what this process saw (see promobserve): sum it over
// processes.
//
// NewAdaptive makes limiter/adaptive's instruments (limitkit.adaptive.*,
// see AdaptiveMetrics) for the service's own concurrency limits.
//
// Only Take and TakeAll calls are decisions; Peek and Reset are not
// counted. Cardinality is bounded: the key is never an attribute, and the
// policy (the limit's key prefix) keeps its own value for the first
// WithMaxPolicies prefixes seen (DefaultMaxPolicies), after which new ones
// are reported as OtherPolicy.
package otelobserve

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/observe"
)

// ScopeName is the instrumentation scope of the meter the metrics are made
// with.
const ScopeName = "github.com/limitkit/limitkit/backend/observe/otelobserve"

// DefaultMaxPolicies is how many distinct policies keep their own
// attribute value unless WithMaxPolicies says otherwise.
const DefaultMaxPolicies = 100

// OtherPolicy is the policy attribute of decisions whose policy came after
// the first max policies.
const OtherPolicy = "other"

// DefaultBuckets are the latency histogram's bucket boundaries, in seconds,
// as promobserve's: from 100 µs through Redis round trips to the fallback
// store's default deadline of 100 ms and beyond.
var DefaultBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}

// Option configures New. Options apply in order; a nil Option is ignored.
type Option func(*options) error

// options are what the Options set, over the defaults New gives.
type options struct {
	maxPolicies int
	buckets     []float64
}

// WithMaxPolicies sets how many distinct policies keep their own attribute
// value (default DefaultMaxPolicies); later ones are OtherPolicy. n must be
// at least 1.
func WithMaxPolicies(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("WithMaxPolicies: the maximum is %d; give 1 or more", n)
		}
		o.maxPolicies = n
		return nil
	}
}

// WithBuckets sets the latency histogram's bucket boundaries in seconds
// (default DefaultBuckets): increasing, not empty.
func WithBuckets(b []float64) Option {
	return func(o *options) error {
		if len(b) == 0 {
			return errors.New("WithBuckets: no buckets; give some, or leave the option out for DefaultBuckets")
		}
		for i := 1; i < len(b); i++ {
			if b[i] <= b[i-1] {
				return fmt.Errorf("WithBuckets: bucket %d (%g) is not above bucket %d (%g); give increasing boundaries", i, b[i], i-1, b[i-1])
			}
		}
		o.buckets = slices.Clone(b)
		return nil
	}
}

// Metrics holds limitkit's OpenTelemetry instruments. Build it with New; it
// is safe for concurrent use.
type Metrics struct {
	decisions   metric.Int64Counter
	cached      metric.Int64Counter
	latency     metric.Float64Histogram
	transitions metric.Int64Counter
	leases      [4]metric.Int64Counter // by leaseIndex
	held        metric.Int64UpDownCounter
	policies    policies
	obs         observe.Observer

	mu       sync.Mutex
	breakers map[string]backend.BreakerState
	stores   map[string]*memorystore.Store
}

// New makes the instruments with a meter of mp, such as
// otel.GetMeterProvider() or an SDK sdkmetric.NewMeterProvider. It fails for
// a nil mp, an invalid option, or a meter that refuses an instrument.
func New(mp metric.MeterProvider, opts ...Option) (*Metrics, error) {
	if mp == nil {
		return nil, errors.New("otelobserve: meter provider is nil; pass otel.GetMeterProvider() or an SDK MeterProvider")
	}
	o := options{maxPolicies: DefaultMaxPolicies, buckets: DefaultBuckets}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("otelobserve: %w", err)
		}
	}
	meter := mp.Meter(ScopeName)
	m := &Metrics{
		policies: policies{max: int64(o.maxPolicies)},
		breakers: map[string]backend.BreakerState{},
		stores:   map[string]*memorystore.Store{},
	}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	m.decisions, err = meter.Int64Counter("limitkit.decisions", metric.WithUnit("{decision}"),
		metric.WithDescription("Rate limit decisions, by policy (key prefix), outcome (allowed, denied, shadow_denied, error) and whether a fallback policy made them (degraded)."))
	add(err)
	m.cached, err = meter.Int64Counter("limitkit.cached_denials", metric.WithUnit("{decision}"),
		metric.WithDescription("Denials a deny cache (backend/denycache) answered without a store call, by policy."))
	add(err)
	m.latency, err = meter.Float64Histogram("limitkit.decision.duration", metric.WithUnit("s"),
		metric.WithDescription("Time the store took to decide, errors included, by policy."),
		metric.WithExplicitBucketBoundaries(o.buckets...))
	add(err)
	m.transitions, err = meter.Int64Counter("limitkit.breaker.transitions", metric.WithUnit("{transition}"),
		metric.WithDescription("Circuit breaker state changes, by the state entered."))
	add(err)
	state, err := meter.Int64ObservableGauge("limitkit.breaker.state",
		metric.WithDescription("1 for the circuit breaker's current state (closed, half-open, open), 0 for the others."))
	add(err)
	evictions, err := meter.Int64ObservableCounter("limitkit.memorystore.active_evictions", metric.WithUnit("{key}"),
		metric.WithDescription("Keys a memory store evicted while still inside their window (each got its full allowance back); a steady rise means MaxKeys is too low."))
	add(err)
	keys, err := meter.Int64ObservableGauge("limitkit.memorystore.keys", metric.WithUnit("{key}"),
		metric.WithDescription("Keys a memory store holds, expired ones not yet reclaimed included."))
	add(err)
	for i, l := range leaseInstruments {
		m.leases[i], err = meter.Int64Counter("limitkit.leases."+l.name, metric.WithUnit("{lease}"), metric.WithDescription(l.help))
		add(err)
	}
	m.held, err = meter.Int64UpDownCounter("limitkit.leases.held", metric.WithUnit("{lease}"),
		metric.WithDescription("Concurrency leases held as this process saw them (acquired - released - expired), by policy."))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("otelobserve: make instruments: %w", err)
	}
	if _, err := meter.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		m.observe(obs, state, evictions, keys)
		return nil
	}, state, evictions, keys); err != nil {
		return nil, fmt.Errorf("otelobserve: register callback: %w", err)
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
	m.breakers[name] = backend.BreakerClosed
	m.mu.Unlock()
	return m.obs.BreakerHook(name)
}

// WatchMemoryStore exports s's key count and active evictions under name,
// read from s.Stats() at each collection. Names must be unique.
func (m *Metrics) WatchMemoryStore(name string, s *memorystore.Store) error {
	if s == nil {
		return errors.New("otelobserve: memory store is nil")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := m.stores[name]; dup {
		return fmt.Errorf("otelobserve: a memory store named %q is already watched; give each its own name", name)
	}
	m.stores[name] = s
	return nil
}

var outcomes = [...]string{"allowed", "denied", "error", "shadow_denied"}

func outcomeIndex(d observe.Decision) int {
	switch {
	case d.Err != nil:
		return 2
	case d.Allowed:
		return 0
	case d.Shadow:
		return 3 // a limit in shadow mode would have denied
	default:
		return 1
	}
}

// decision records d with the call's context, so that the SDK can take
// exemplars (trace ids) from it.
func (m *Metrics) decision(ctx context.Context, d observe.Decision) {
	if d.Lease != observe.NoLease {
		m.lease(ctx, d)
	}
	if d.Op != observe.Take && d.Op != observe.TakeAll {
		return
	}
	p := m.policies.get(d.Policy)
	degraded := 0
	if d.Degraded {
		degraded = 1
	}
	// Passed as ready-made slices: a variadic call would allocate one.
	m.decisions.Add(ctx, 1, p.decisions[outcomeIndex(d)][degraded]...)
	if d.Cached {
		m.cached.Add(ctx, 1, p.policy...)
	}
	m.latency.Record(ctx, d.Latency.Seconds(), p.latency...)
}

// leaseInstruments are the lease counters, in leaseIndex order.
var leaseInstruments = [4]struct{ name, help string }{
	{"acquired", "Concurrency leases granted, by policy (key prefix)."},
	{"denied", "Concurrency leases refused (every slot held), by policy."},
	{"released", "Concurrency leases given back while still held, by policy."},
	{"expired", "Concurrency leases a Release or Renew found no longer held: the holder worked past the lease timeout, by policy."},
}

// leaseIndex is the counter of e and its change to the held count; -1 for
// events not counted (renewals).
func leaseIndex(e observe.LeaseEvent) (int, int64) {
	switch e {
	case observe.LeaseAcquired:
		return 0, 1
	case observe.LeaseDenied:
		return 1, 0
	case observe.LeaseReleased:
		return 2, -1
	case observe.LeaseExpired:
		return 3, -1
	}
	return -1, 0
}

func (m *Metrics) lease(ctx context.Context, d observe.Decision) {
	i, delta := leaseIndex(d.Lease)
	if i < 0 {
		return
	}
	p := m.policies.get(d.LeasePolicy)
	m.leases[i].Add(ctx, 1, p.policy...)
	if delta != 0 {
		m.held.Add(ctx, delta, p.policy...)
	}
}

func (m *Metrics) breakerChange(c observe.BreakerChange) {
	m.mu.Lock()
	m.breakers[c.Breaker] = c.To
	m.mu.Unlock()
	m.transitions.Add(context.Background(), 1, metric.WithAttributes(
		attribute.String("breaker", c.Breaker), attribute.String("to", string(c.To))))
}

var states = []backend.BreakerState{backend.BreakerClosed, backend.BreakerHalfOpen, backend.BreakerOpen}

// observe reports the asynchronous instruments at collection time.
func (m *Metrics) observe(obs metric.Observer, state, evictions, keys metric.Int64Observable) {
	m.mu.Lock()
	breakers := make(map[string]backend.BreakerState, len(m.breakers))
	for n, s := range m.breakers {
		breakers[n] = s
	}
	stores := make(map[string]*memorystore.Store, len(m.stores))
	for n, s := range m.stores {
		stores[n] = s
	}
	m.mu.Unlock()
	for name, cur := range breakers {
		for _, s := range states {
			v := int64(0)
			if s == cur {
				v = 1
			}
			obs.ObserveInt64(state, v, metric.WithAttributes(attribute.String("breaker", name), attribute.String("state", string(s))))
		}
	}
	for name, s := range stores {
		st := s.Stats() // locks each shard in turn: once per collection, not per request
		attrs := metric.WithAttributes(attribute.String("store", name))
		obs.ObserveInt64(evictions, int64(st.ActiveEvictions), attrs)
		obs.ObserveInt64(keys, int64(st.Keys), attrs)
	}
}

// policies maps policy names to their precomputed attribute sets, for at
// most max names; the rest share OtherPolicy's.
type policies struct {
	max   int64
	n     atomic.Int64
	known sync.Map // string -> *policyAttrs
	mu    sync.Mutex
	other atomic.Pointer[policyAttrs]
}

// policyAttrs are one policy's attribute options, made once so that a
// decision allocates nothing for them.
type policyAttrs struct {
	decisions [len(outcomes)][2][]metric.AddOption // by outcome, degraded
	policy    []metric.AddOption
	latency   []metric.RecordOption
}

func newPolicyAttrs(name string) *policyAttrs {
	set := attribute.NewSet(attribute.String("policy", name))
	p := &policyAttrs{latency: []metric.RecordOption{metric.WithAttributeSet(set)}, policy: []metric.AddOption{metric.WithAttributeSet(set)}}
	for i, o := range outcomes {
		for deg := range 2 {
			p.decisions[i][deg] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(
				attribute.String("policy", name), attribute.String("outcome", o), attribute.Bool("degraded", deg == 1)))}
		}
	}
	return p
}

func (ps *policies) get(name string) *policyAttrs {
	if p, ok := ps.known.Load(name); ok {
		return p.(*policyAttrs)
	}
	if ps.n.Load() < ps.max {
		ps.mu.Lock()
		defer ps.mu.Unlock()
		if p, ok := ps.known.Load(name); ok {
			return p.(*policyAttrs)
		}
		if ps.n.Load() < ps.max {
			p := newPolicyAttrs(name)
			ps.known.Store(name, p)
			ps.n.Add(1)
			return p
		}
	}
	if p := ps.other.Load(); p != nil {
		return p
	}
	ps.other.CompareAndSwap(nil, newPolicyAttrs(OtherPolicy))
	return ps.other.Load()
}
