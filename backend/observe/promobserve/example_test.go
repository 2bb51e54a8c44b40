package promobserve_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/observe"
	"github.com/limitkit/limitkit/backend/observe/promobserve"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
)

func Example() {
	reg := prometheus.NewRegistry() // in a service: prometheus.DefaultRegisterer
	metrics, err := promobserve.New(reg)
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

	// What Prometheus scrapes (in a service: http.Handle("/metrics", promhttp.Handler())).
	w := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for line := range strings.Lines(w.Body.String()) {
		if strings.HasPrefix(line, "limitkit_decisions_total") {
			fmt.Print(line)
		}
	}
	// Output:
	// limitkit_decisions_total{outcome="allowed",policy="api:"} 2
	// limitkit_decisions_total{outcome="denied",policy="api:"} 1
}
