package limiter_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
)

// TestPlans: the resolver picks each request's plan; counts stay per key
// and plan; an unknown plan is a clear error.
func TestPlans(t *testing.T) {
	everyStore(t, func(t *testing.T, store backend.Store) {
		ctx := t.Context()
		fake := clock.NewFake(liveStart)
		free, err := limiter.New(store, limiter.Config{Limit: 2, Window: time.Minute, Prefix: "api:free:"}, limiter.WithClock(fake))
		require.NoError(t, err)
		pro, err := limiter.New(store, limiter.Config{Limit: 5, Window: time.Minute, Prefix: "api:pro:"}, limiter.WithClock(fake))
		require.NoError(t, err)
		tiers := map[string]string{"acme": "pro", "bob": "free", "eve": "gold"}
		plans, err := limiter.NewPlans(map[string]*limiter.Limiter{"free": free, "pro": pro},
			func(_ context.Context, tenant string) (string, error) { return tiers[tenant], nil })
		require.NoError(t, err)
		require.Equal(t, []string{"free", "pro"}, plans.Names())

		admitted := func(tenant string, n int) (int, string) {
			ok, plan := 0, ""
			for range n {
				d, p, err := plans.Allow(ctx, tenant)
				require.NoError(t, err)
				plan = p
				if d.Allowed {
					ok++
				}
			}
			return ok, plan
		}
		n, plan := admitted("acme", 7)
		require.Equal(t, 5, n)
		require.Equal(t, "pro", plan)
		n, plan = admitted("bob", 7)
		require.Equal(t, 2, n)
		require.Equal(t, "free", plan)

		// acme moves to free: its free count is its own, from zero.
		tiers["acme"] = "free"
		n, _ = admitted("acme", 3)
		require.Equal(t, 2, n)

		_, _, err = plans.Allow(ctx, "eve")
		require.ErrorIs(t, err, limiter.ErrUnknownPlan)
		require.ErrorContains(t, err, `unknown plan "gold"; the plans are ["free" "pro"]`)

		// A plan's limit can change while it serves.
		require.NoError(t, pro.SetConfig(limiter.Config{Limit: 6, Window: time.Minute, Prefix: "api:pro:"}))
		tiers["acme"] = "pro"
		n, _ = admitted("acme", 2)
		require.Equal(t, 1, n, "5 counted of the new 6")
	})
}

func TestPlansBadInput(t *testing.T) {
	a, _ := newLimiter(t, limiter.Config{Limit: 2, Window: time.Minute, Prefix: "same:"})
	b, _ := newLimiter(t, limiter.Config{Limit: 5, Window: time.Minute, Prefix: "same:"})
	resolve := func(context.Context, string) (string, error) { return "a", nil }
	_, err := limiter.NewPlans(map[string]*limiter.Limiter{"a": a, "b": b}, resolve)
	require.ErrorIs(t, err, limiter.ErrInvalidConfig)
	require.ErrorContains(t, err, `both count under the prefix "same:"`)
	_, err = limiter.NewPlans(map[string]*limiter.Limiter{"a": a}, nil)
	require.ErrorIs(t, err, limiter.ErrInvalidConfig)
	_, err = limiter.NewPlans(nil, resolve)
	require.ErrorIs(t, err, limiter.ErrInvalidConfig)
	_, err = limiter.NewPlans(map[string]*limiter.Limiter{"a": nil}, resolve)
	require.ErrorIs(t, err, limiter.ErrInvalidConfig)

	boom := errors.New("no such tenant")
	p, err := limiter.NewPlans(map[string]*limiter.Limiter{"a": a}, func(context.Context, string) (string, error) { return "", boom })
	require.NoError(t, err)
	_, _, err = p.Allow(t.Context(), "k")
	require.ErrorIs(t, err, boom, "the resolver's error comes back as it is")
}
