package promobserve

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/backend/denycache"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/observe"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
)

// TestCachedDenialsCounted: denials a deny cache answers are counted apart,
// and only those.
func TestCachedDenialsCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics, err := New(reg)
	require.NoError(t, err)
	mem, err := memorystore.New()
	require.NoError(t, err)
	cache, err := denycache.New(mem, nil)
	require.NoError(t, err)
	lim, err := limiter.New(observe.Wrap(cache, metrics.Observer()),
		limiter.Config{Limit: 1, Window: time.Minute, Prefix: "otp:"}, limiter.WithClock(clock.NewFake(start)))
	require.NoError(t, err)
	for range 4 { // one admission, one denial from the store, two from the cache
		_, err := lim.Allow(t.Context(), "u")
		require.NoError(t, err)
	}
	text := scrape(t, reg)
	require.Equal(t, 2.0, value(t, text, `limitkit_cached_denials_total{policy="otp:"}`))
	require.Equal(t, 3.0, value(t, text, `limitkit_decisions_total{outcome="denied",policy="otp:"}`))
}
