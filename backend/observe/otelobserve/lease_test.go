package otelobserve_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/observe"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
)

// TestLeaseMetrics: leases acquired, denied, released and found expired
// are counted, and the held count is acquired - released - expired, read
// back from a collection at each step.
func TestLeaseMetrics(t *testing.T) {
	ctx := t.Context()
	metrics, reader := newMetrics(t)
	mem, err := memorystore.New()
	require.NoError(t, err)
	fake := clock.NewFake(start)
	lim, err := limiter.New(observe.Wrap(mem, metrics.Observer()),
		limiter.Config{Algorithm: algorithms.Concurrency, Limit: 2, Window: 10 * time.Second, Prefix: "up:"}, limiter.WithClock(fake))
	require.NoError(t, err)
	held := func() float64 { return collect(t, reader)["limitkit.leases.held{policy=up:}"].value }

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
	fake.Advance(10*time.Second + time.Millisecond) // b expires while its holder works (the ms after a's, granted just after it)
	require.ErrorIs(t, b.Release(ctx), limiter.ErrLeaseNotHeld)
	require.Equal(t, 0.0, held())

	got := collect(t, reader)
	require.Equal(t, 2.0, got["limitkit.leases.acquired{policy=up:}"].value)
	require.Equal(t, 1.0, got["limitkit.leases.denied{policy=up:}"].value)
	require.Equal(t, 1.0, got["limitkit.leases.released{policy=up:}"].value)
	require.Equal(t, 1.0, got["limitkit.leases.expired{policy=up:}"].value)
	require.Equal(t, 1.0, got["limitkit.decisions{degraded=false,outcome=denied,policy=up:}"].value)
}
