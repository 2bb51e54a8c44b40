// Command withmetrics adds Prometheus metrics to coreonly: the control of
// limiter/deps_test.go, which must find the third-party code it links.
package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/observe"
	"github.com/limitkit/limitkit/backend/observe/promobserve"
	"github.com/limitkit/limitkit/limiter"
)

func main() {
	metrics, err := promobserve.New(prometheus.NewRegistry())
	if err != nil {
		panic(err)
	}
	store, _ := memorystore.New()
	_, _ = limiter.New(observe.Wrap(store, metrics.Observer()), limiter.Config{Limit: 1, Window: 1e9})
}
