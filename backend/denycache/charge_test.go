package denycache_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/denycache"
	"github.com/limitkit/limitkit/backend/memorystore"
)

// TestChargeReachesTheStore: a key denied and cached is charged one unit;
// the charge must reach the store (it is recorded, not answered from
// memory), so the store's count grows. The control is the same request
// without Charge, which the cache answers.
func TestChargeReachesTheStore(t *testing.T) {
	ctx := context.Background()
	mem, err := memorystore.New()
	require.NoError(t, err)
	cache, err := denycache.New(mem, nil)
	require.NoError(t, err)
	rule := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 2, Window: time.Hour}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	req := backend.Request{Key: backend.Key{Prefix: "t:", ID: "k"}, Rule: rule, Now: now, Cost: 1}
	for range 3 {
		_, err := cache.Take(ctx, req)
		require.NoError(t, err)
	}
	res, err := cache.Take(ctx, req)
	require.NoError(t, err)
	require.True(t, res.Cached, "control: a denied one-unit Take is answered from the cache")

	charge := req
	charge.Charge = true
	res, err = cache.Take(ctx, charge)
	require.NoError(t, err)
	require.False(t, res.Cached, "a charge is never answered from the cache")
	require.True(t, res.Allowed, "a charge is recorded")
	require.Zero(t, res.Remaining)
	// Two admitted, one charged: a give back of two leaves the key spent.
	_, err = mem.GiveBack(ctx, backend.Request{Key: req.Key, Rule: rule, Now: now, Cost: 2})
	require.NoError(t, err)
	got, err := mem.Peek(ctx, req)
	require.NoError(t, err)
	require.Equal(t, int64(1), got.Remaining, "the charge was counted in the store")
}
