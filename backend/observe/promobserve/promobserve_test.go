package promobserve

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/observe"
	"github.com/limitkit/limitkit/backend/storetest"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/fallback"
	"github.com/limitkit/limitkit/limiter"
)

var start = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// scrape fetches the registry's exposition text over HTTP, as Prometheus
// would.
func scrape(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(body)
}

// value returns the sample of the exposition line that starts with series
// (metric name and labels exactly as exposed), or fails.
func value(t *testing.T, text, series string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(text)
	require.NotNil(t, m, "no sample %s in:\n%s", series, text)
	v, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	return v
}

var errDown = errors.New("connection refused")

func TestMetricsScraped(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics, err := New(reg)
	require.NoError(t, err)
	ctx := context.Background()
	fake := clock.NewFake(start)

	// A healthy memory store: 3 allowed, 2 denied, and a Peek that is not
	// counted.
	mem, err := memorystore.New()
	require.NoError(t, err)
	api, err := limiter.New(observe.Wrap(mem, metrics.Observer()), limiter.Config{Limit: 3, Window: time.Minute, Prefix: "api:"},
		limiter.WithClock(fake))
	require.NoError(t, err)
	for range 5 {
		_, err := api.Allow(ctx, "alice")
		require.NoError(t, err)
	}
	_, err = api.Peek(ctx, "alice")
	require.NoError(t, err)

	// A store that fails: errors.
	broken, err := limiter.New(observe.Wrap(storetest.Down{Err: errDown}, metrics.Observer()), limiter.Config{Limit: 3, Window: time.Minute, Prefix: "broken:"},
		limiter.WithClock(fake))
	require.NoError(t, err)
	_, err = broken.Allow(ctx, "bob")
	require.ErrorIs(t, err, errDown)

	// A fallback store over the failing one: the breaker opens at the first
	// failure and decisions are degraded (limit 1 locally: 1 allowed, 1
	// denied).
	guard, err := fallback.New(storetest.Down{Err: errDown}, fallback.WithFailureThreshold(1), fallback.WithLogger(slog.New(slog.DiscardHandler)),
		fallback.WithStateHook(metrics.BreakerHook("redis")))
	require.NoError(t, err)
	text := scrape(t, reg)
	assert.Equal(t, 1.0, value(t, text, `limitkit_breaker_state{breaker="redis",state="closed"}`), "a new breaker is closed")
	login, err := limiter.New(observe.Wrap(guard, metrics.Observer()), limiter.Config{Limit: 1, Window: time.Minute, Prefix: "login:"},
		limiter.WithClock(fake))
	require.NoError(t, err)
	for range 2 {
		_, err := login.Allow(ctx, "carol")
		require.NoError(t, err)
	}

	// Memory store evictions of active keys.
	small, err := memorystore.New(memorystore.WithMaxKeys(1))
	require.NoError(t, err)
	require.NoError(t, metrics.WatchMemoryStore("local", small))
	require.ErrorContains(t, metrics.WatchMemoryStore("local", small), "already watched")
	require.Error(t, metrics.WatchMemoryStore("other", nil))
	tiny, err := limiter.New(small, limiter.Config{Limit: 5, Window: time.Minute}, limiter.WithClock(fake))
	require.NoError(t, err)
	for _, k := range []string{"a", "b", "c", "d"} {
		_, err := tiny.Allow(ctx, k)
		require.NoError(t, err)
	}

	text = scrape(t, reg)
	for series, want := range map[string]float64{
		`limitkit_decisions_total{outcome="allowed",policy="api:"}`:            3,
		`limitkit_decisions_total{outcome="denied",policy="api:"}`:             2,
		`limitkit_decisions_total{outcome="error",policy="broken:"}`:           1,
		`limitkit_decisions_total{outcome="allowed",policy="login:"}`:          1,
		`limitkit_decisions_total{outcome="denied",policy="login:"}`:           1,
		`limitkit_degraded_decisions_total{outcome="allowed",policy="login:"}`: 1,
		`limitkit_degraded_decisions_total{outcome="denied",policy="login:"}`:  1,
		`limitkit_decision_duration_seconds_count{policy="api:"}`:              5,
		`limitkit_decision_duration_seconds_count{policy="broken:"}`:           1,
		`limitkit_decision_duration_seconds_bucket{policy="api:",le="+Inf"}`:   5,
		`limitkit_breaker_state{breaker="redis",state="open"}`:                 1,
		`limitkit_breaker_state{breaker="redis",state="closed"}`:               0,
		`limitkit_breaker_state{breaker="redis",state="half-open"}`:            0,
		`limitkit_breaker_transitions_total{breaker="redis",to="open"}`:        1,
		`limitkit_memorystore_active_evictions_total{store="local"}`:           3,
		`limitkit_memorystore_keys{store="local"}`:                             1,
	} {
		assert.Equal(t, want, value(t, text, series), series)
	}
	assert.NotContains(t, text, `limitkit_degraded_decisions_total{outcome="allowed",policy="api:"}`, "healthy decisions are not degraded")
	assert.Contains(t, text, "# TYPE limitkit_decision_duration_seconds histogram")
	assert.Contains(t, text, "# TYPE limitkit_memorystore_active_evictions_total counter")
}

func TestNewErrors(t *testing.T) {
	_, err := New(nil)
	require.ErrorContains(t, err, "registerer is nil")
	reg := prometheus.NewRegistry()
	_, err = New(reg)
	require.NoError(t, err)
	_, err = New(reg)
	var already prometheus.AlreadyRegisteredError
	require.ErrorAs(t, err, &already, "a second set of the same metrics is refused")
}
