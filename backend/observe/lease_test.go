package observe_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/observe"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
)

// TestLeaseEvents: each lease call is reported with what it did to the
// lease, its op and outcome.
func TestLeaseEvents(t *testing.T) {
	ctx := t.Context()
	var mu sync.Mutex
	var seen []string
	obs := observe.Observer{OnDecision: func(_ context.Context, d observe.Decision) {
		mu.Lock()
		seen = append(seen, string(d.Op)+" "+d.Outcome()+" "+string(d.Lease)+" "+d.LeasePolicy)
		mu.Unlock()
	}}
	mem, err := memorystore.New()
	require.NoError(t, err)
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	lim, err := limiter.New(observe.Wrap(mem, obs),
		limiter.Config{Algorithm: algorithms.Concurrency, Limit: 1, Window: time.Second, Prefix: "cc:"}, limiter.WithClock(fake))
	require.NoError(t, err)
	a, _, err := lim.Acquire(ctx, "u")
	require.NoError(t, err)
	_, _, err = lim.Acquire(ctx, "u")
	require.NoError(t, err)
	require.NoError(t, a.Renew(ctx))
	require.NoError(t, a.Release(ctx))
	b, _, err := lim.Acquire(ctx, "u")
	require.NoError(t, err)
	fake.Advance(time.Second + time.Millisecond) // b: granted after a in the same ms, it expires within the next
	require.ErrorIs(t, b.Release(ctx), limiter.ErrLeaseNotHeld)
	rate, err := limiter.New(observe.Wrap(mem, obs), limiter.Config{Limit: 1, Window: time.Second, Prefix: "r:"}, limiter.WithClock(fake))
	require.NoError(t, err)
	_, err = rate.Allow(ctx, "u")
	require.NoError(t, err)
	require.Equal(t, []string{
		"take allowed acquired cc:",
		"take denied denied cc:",
		"renew renewed renewed cc:",
		"release released released cc:",
		"take allowed acquired cc:",
		"release expired expired cc:",
		"take allowed  ", // a rate limit: no lease event
	}, seen)
}
