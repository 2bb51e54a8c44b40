package otelobserve_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/backend/denycache"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/observe"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
)

// TestCachedDenials: denials a deny cache answers are counted apart, and
// only those.
func TestCachedDenials(t *testing.T) {
	metrics, reader := newMetrics(t)
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
	got := collect(t, reader)
	require.Equal(t, 2.0, got["limitkit.cached_denials{policy=otp:}"].value)
	require.Equal(t, 3.0, got["limitkit.decisions{degraded=false,outcome=denied,policy=otp:}"].value)
}
