package promobserve

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/observe"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
)

// TestLeaseMetrics: leases acquired, denied, released and found expired
// are counted, and the held gauge is acquired - released - expired, read
// back from a scrape at each step.
func TestLeaseMetrics(t *testing.T) {
	ctx := t.Context()
	reg := prometheus.NewRegistry()
	metrics, err := New(reg)
	require.NoError(t, err)
	mem, err := memorystore.New()
	require.NoError(t, err)
	fake := clock.NewFake(start)
	lim, err := limiter.New(observe.Wrap(mem, metrics.Observer()),
		limiter.Config{Algorithm: algorithms.Concurrency, Limit: 2, Window: 10 * time.Second, Prefix: "up:"}, limiter.WithClock(fake))
	require.NoError(t, err)
	held := func() float64 { return value(t, scrape(t, reg), `limitkit_leases_held{policy="up:"}`) }

	a, _, err := lim.Acquire(ctx, "u")
	require.NoError(t, err)
	b, _, err := lim.Acquire(ctx, "u")
	require.NoError(t, err)
	none, _, err := lim.Acquire(ctx, "u")
	require.NoError(t, err)
	require.Nil(t, none)
	require.Equal(t, 2.0, held())
	require.NoError(t, a.Release(ctx))
	require.Equal(t, 1.0, held())
	require.ErrorIs(t, a.Release(ctx), limiter.ErrLeaseReleased) // not a store call: not counted
	fake.Advance(10*time.Second + time.Millisecond)              // b expires while its holder works (the ms after a's, granted just after it)
	require.ErrorIs(t, b.Renew(ctx), limiter.ErrLeaseNotHeld)
	require.Equal(t, 0.0, held())
	c, _, err := lim.Acquire(ctx, "u")
	require.NoError(t, err)
	require.NoError(t, c.Renew(ctx))
	require.Equal(t, 1.0, held(), "a renewal keeps the count")

	text := scrape(t, reg)
	require.Equal(t, 3.0, value(t, text, `limitkit_leases_acquired_total{policy="up:"}`))
	require.Equal(t, 1.0, value(t, text, `limitkit_leases_denied_total{policy="up:"}`))
	require.Equal(t, 1.0, value(t, text, `limitkit_leases_released_total{policy="up:"}`))
	require.Equal(t, 1.0, value(t, text, `limitkit_leases_expired_total{policy="up:"}`))
	require.Equal(t, 1.0, value(t, text, `limitkit_decisions_total{outcome="denied",policy="up:"}`))
	require.Equal(t, 3.0, value(t, text, `limitkit_decisions_total{outcome="allowed",policy="up:"}`), "releases and renewals are not decisions")
}

// TestLeaseMetricsThroughTakeAll: a lease taken with a rate unit (a
// Composite) is counted under the concurrency limit's prefix even when the
// rate limit describes the decision, so that its release balances it.
func TestLeaseMetricsThroughTakeAll(t *testing.T) {
	ctx := t.Context()
	reg := prometheus.NewRegistry()
	metrics, err := New(reg)
	require.NoError(t, err)
	mem, err := memorystore.New()
	require.NoError(t, err)
	c, err := limiter.NewComposite(observe.Wrap(mem, metrics.Observer()), []limiter.Config{
		{Limit: 1, Window: time.Hour, Prefix: "rate:"}, // the least left: it describes the decision
		{Algorithm: algorithms.Concurrency, Limit: 5, Window: time.Minute, Prefix: "cc:"},
	}, limiter.WithClock(clock.NewFake(start)))
	require.NoError(t, err)
	lease, d, err := c.Acquire(ctx, "u", "u")
	require.NoError(t, err)
	require.Equal(t, 0, d.Rule)
	require.Equal(t, 1.0, value(t, scrape(t, reg), `limitkit_leases_held{policy="cc:"}`))
	require.NoError(t, lease.Release(ctx))
	require.Equal(t, 0.0, value(t, scrape(t, reg), `limitkit_leases_held{policy="cc:"}`))
}
