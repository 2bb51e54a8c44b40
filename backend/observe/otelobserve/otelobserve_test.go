package otelobserve_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/observe"
	"github.com/limitkit/limitkit/backend/observe/otelobserve"
	"github.com/limitkit/limitkit/backend/storetest"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/fallback"
	"github.com/limitkit/limitkit/limiter"
)

var start = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

var errDown = errors.New("connection refused")

func newMetrics(t *testing.T, opts ...otelobserve.Option) (*otelobserve.Metrics, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := otelobserve.New(mp, opts...)
	require.NoError(t, err)
	return m, reader
}

// series is one collected point: its value, or a histogram's count.
type series struct {
	value  float64
	bounds []float64
	sum    float64
}

// collect reads every point as "name{k=v,...}" with sorted attributes.
func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]series {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(context.Background(), &rm))
	out := map[string]series{}
	name := func(metric string, set attribute.Set) string {
		var parts []string
		for _, kv := range set.ToSlice() {
			parts = append(parts, string(kv.Key)+"="+kv.Value.String())
		}
		return metric + "{" + strings.Join(parts, ",") + "}"
	}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, otelobserve.ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[name(m.Name, p.Attributes)] = series{value: float64(p.Value)}
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[name(m.Name, p.Attributes)] = series{value: float64(p.Value)}
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					out[name(m.Name, p.Attributes)] = series{value: p.Value}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[name(m.Name, p.Attributes)] = series{value: float64(p.Count), bounds: p.Bounds, sum: p.Sum}
				}
			default:
				t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return out
}

func TestMetrics(t *testing.T) {
	metrics, reader := newMetrics(t)
	ctx := context.Background()
	fake := clock.NewFake(start)

	// A healthy memory store: 3 allowed, 2 denied; Peek and Reset are
	// not decisions.
	mem, err := memorystore.New()
	require.NoError(t, err)
	api, err := limiter.New(observe.Wrap(mem, metrics.Observer()), limiter.Config{Limit: 3, Window: time.Minute, Prefix: "api:"},
		limiter.WithClock(fake))
	require.NoError(t, err)
	for range 5 {
		_, err := api.Allow(ctx, "alice-secret-key")
		require.NoError(t, err)
	}
	_, err = api.Peek(ctx, "alice-secret-key")
	require.NoError(t, err)

	// A store that fails: errors.
	broken, err := limiter.New(observe.Wrap(storetest.Down{Err: errDown}, metrics.Observer()), limiter.Config{Limit: 3, Window: time.Minute, Prefix: "broken:"},
		limiter.WithClock(fake))
	require.NoError(t, err)
	_, err = broken.Allow(ctx, "bob")
	require.ErrorIs(t, err, errDown)

	// A fallback over the failing store: the breaker opens at the first
	// failure; decisions are degraded (limit 1 locally: 1 allowed, 1 denied).
	guard, err := fallback.New(storetest.Down{Err: errDown}, fallback.WithFailureThreshold(1), fallback.WithLogger(slog.New(slog.DiscardHandler)),
		fallback.WithStateHook(metrics.BreakerHook("redis")))
	require.NoError(t, err)
	got := collect(t, reader)
	assert.Equal(t, 1.0, got["limitkit.breaker.state{breaker=redis,state=closed}"].value, "a new breaker is closed")
	login, err := limiter.New(observe.Wrap(guard, metrics.Observer()), limiter.Config{Limit: 1, Window: time.Minute, Prefix: "login:"},
		limiter.WithClock(fake))
	require.NoError(t, err)
	for range 2 {
		_, err := login.Allow(ctx, "carol")
		require.NoError(t, err)
	}

	// A guard: TakeAll, reported under the deciding request's policy.
	pay, err := limiter.New(observe.Wrap(mem, metrics.Observer()), limiter.Config{Limit: 5, Window: time.Minute, Prefix: "pay:",
		Guard: &limiter.Guard{Limit: 1, Window: time.Hour}}, limiter.WithClock(fake))
	require.NoError(t, err)
	for range 2 {
		_, err := pay.Allow(ctx, "dave")
		require.NoError(t, err)
	}

	// Memory store evictions of active keys.
	small, err := memorystore.New(memorystore.WithMaxKeys(1))
	require.NoError(t, err)
	require.NoError(t, metrics.WatchMemoryStore("local", small))
	require.ErrorContains(t, metrics.WatchMemoryStore("local", small), "already watched")
	require.Error(t, metrics.WatchMemoryStore("x", nil))
	tiny, err := limiter.New(small, limiter.Config{Limit: 5, Window: time.Minute}, limiter.WithClock(fake))
	require.NoError(t, err)
	for _, k := range []string{"a", "b", "c", "d"} {
		_, err := tiny.Allow(ctx, k)
		require.NoError(t, err)
	}

	got = collect(t, reader)
	for name, want := range map[string]float64{
		"limitkit.decisions{degraded=false,outcome=allowed,policy=api:}":  3,
		"limitkit.decisions{degraded=false,outcome=denied,policy=api:}":   2,
		"limitkit.decisions{degraded=false,outcome=error,policy=broken:}": 1,
		"limitkit.decisions{degraded=true,outcome=allowed,policy=login:}": 1,
		"limitkit.decisions{degraded=true,outcome=denied,policy=login:}":  1,
		// The guard ("pay:guard:", 1 an hour) had least left when it
		// admitted the first, and denied the second.
		"limitkit.decisions{degraded=false,outcome=allowed,policy=pay:guard:}": 1,
		"limitkit.decisions{degraded=false,outcome=denied,policy=pay:guard:}":  1,
		"limitkit.decision.duration{policy=api:}":                              5,
		"limitkit.decision.duration{policy=broken:}":                           1,
		"limitkit.breaker.state{breaker=redis,state=open}":                     1,
		"limitkit.breaker.state{breaker=redis,state=closed}":                   0,
		"limitkit.breaker.state{breaker=redis,state=half-open}":                0,
		"limitkit.breaker.transitions{breaker=redis,to=open}":                  1,
		"limitkit.memorystore.active_evictions{store=local}":                   3,
		"limitkit.memorystore.keys{store=local}":                               1,
	} {
		s, ok := got[name]
		if assert.True(t, ok, "missing %s in %v", name, slices.Sorted(maps.Keys(got))) {
			assert.Equal(t, want, s.value, name)
		}
	}
	assert.NotContains(t, got, "limitkit.decisions{degraded=true,outcome=allowed,policy=api:}", "healthy decisions are not degraded")
	assert.Equal(t, otelobserve.DefaultBuckets, got["limitkit.decision.duration{policy=api:}"].bounds)
	assert.Positive(t, got["limitkit.decision.duration{policy=api:}"].sum, "latencies are recorded")
	// Every decision is counted once: 5 + 1 + 2 + 2.
	total := 0.0
	for name, s := range got {
		if strings.HasPrefix(name, "limitkit.decisions{") {
			total += s.value
		}
	}
	assert.Equal(t, 10.0, total, "Peek or the unwrapped store was counted")
	for name := range got {
		assert.NotContains(t, name, "alice", "a key became an attribute")
	}
}

// policiesSeen returns the policy values of the decisions counter.
func policiesSeen(t *testing.T, r *sdkmetric.ManualReader) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for name, s := range collect(t, r) {
		if !strings.HasPrefix(name, "limitkit.decisions{") {
			continue
		}
		_, p, _ := strings.Cut(name, "policy=")
		out[strings.TrimSuffix(p, "}")] += s.value
	}
	return out
}

func TestPolicyCardinalityIsBounded(t *testing.T) {
	run := func(t *testing.T, opts ...otelobserve.Option) map[string]float64 {
		metrics, reader := newMetrics(t, opts...)
		mem, err := memorystore.New()
		require.NoError(t, err)
		store := observe.Wrap(mem, metrics.Observer())
		for i := range 5 {
			lim, err := limiter.New(store, limiter.Config{Limit: 10, Window: time.Minute, Prefix: fmt.Sprintf("p%d:", i)})
			require.NoError(t, err)
			for range 2 {
				_, err := lim.Allow(context.Background(), "k")
				require.NoError(t, err)
			}
		}
		return policiesSeen(t, reader)
	}
	assert.Equal(t, map[string]float64{"p0:": 2, "p1:": 2, otelobserve.OtherPolicy: 6}, run(t, otelobserve.WithMaxPolicies(2)))
	// Control: under the default cap every policy keeps its name.
	assert.Equal(t, map[string]float64{"p0:": 2, "p1:": 2, "p2:": 2, "p3:": 2, "p4:": 2}, run(t))
}

// TestPolicyCapUnderConcurrency races new policies against the cap: each
// round, 8 goroutines released at once each bring a policy of their own to
// metrics that admit one. (Dropping the check made under the lock breaks
// the cap in a fraction of rounds; 50 rounds catch it.)
func TestPolicyCapUnderConcurrency(t *testing.T) {
	for round := range 50 {
		metrics, reader := newMetrics(t, otelobserve.WithMaxPolicies(1))
		obs := metrics.Observer()
		var ready, done sync.WaitGroup
		release := make(chan struct{})
		for g := range 8 {
			ready.Add(1)
			done.Add(1)
			go func() {
				defer done.Done()
				ready.Done()
				<-release
				obs.OnDecision(context.Background(), observe.Decision{Op: observe.Take, Policy: fmt.Sprintf("p%d:", g), Allowed: true})
			}()
		}
		ready.Wait()
		close(release)
		done.Wait()
		seen := policiesSeen(t, reader)
		require.Len(t, seen, 2, "round %d: one policy and other: %v", round, seen)
		require.Equal(t, 7.0, seen[otelobserve.OtherPolicy], "round %d", round)
	}
}

func TestNewRejectsBadInput(t *testing.T) {
	_, err := otelobserve.New(nil)
	assert.Error(t, err)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	for name, opt := range map[string]otelobserve.Option{
		"zero policies":      otelobserve.WithMaxPolicies(0),
		"no buckets":         otelobserve.WithBuckets(nil),
		"unsorted buckets":   otelobserve.WithBuckets([]float64{.1, .01}),
		"duplicated buckets": otelobserve.WithBuckets([]float64{.1, .1}),
	} {
		_, err := otelobserve.New(mp, opt)
		assert.ErrorContains(t, err, "otelobserve: With", name)
	}
	_, err = otelobserve.New(mp, nil, otelobserve.WithBuckets([]float64{.001, .01}), otelobserve.WithMaxPolicies(1))
	assert.NoError(t, err, "control: good options, and a nil one ignored")
}
