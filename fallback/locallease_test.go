package fallback_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/fallback"
)

// TestLocalLeaseIDsAreTheirStores (issue 22, defect 6): two fallback stores
// (two processes) with their primaries down each grant a local lease at
// local limit 1 in the same instant. The ids differ, and releasing one
// store's id on the other frees nothing there: its holder keeps the slot.
// The store's own release still works.
func TestLocalLeaseIDsAreTheirStores(t *testing.T) {
	ctx := t.Context()
	rule := algorithms.Rule{Algorithm: algorithms.Concurrency, Limit: 1, Window: time.Minute}
	now := time.Now()
	req := backend.Request{Key: backend.Key{Prefix: "two:", ID: "k"}, Rule: rule, Now: now, Cost: 1, OnFailure: backend.LocalPolicy(1)}
	var stores [2]*fallback.Store
	var ids [2]int64
	for i := range stores {
		p := newFlakyLeases(t)
		p.mode.Store(failing)
		stores[i] = newStore(t, p, fallback.WithOpenTimeout(time.Hour))
		res, err := stores[i].Take(ctx, req)
		require.NoError(t, err)
		require.True(t, res.Allowed && res.Degraded, "store %d grants locally", i)
		ids[i] = res.Lease
	}
	require.NotEqual(t, ids[0], ids[1], "two stores granting in one instant issue one id")

	held, err := stores[1].Release(ctx, req, ids[0])
	require.NoError(t, err)
	require.False(t, held, "store 1 released store 0's lease")
	renewed, err := stores[1].Renew(ctx, req, ids[0])
	require.NoError(t, err)
	require.False(t, renewed.Allowed, "store 1 renewed store 0's lease")
	res, err := stores[1].Take(ctx, req)
	require.NoError(t, err)
	require.False(t, res.Allowed, "store 1's holder lost its slot: 2 in flight at local limit 1")

	held, err = stores[0].Release(ctx, req, ids[0])
	require.NoError(t, err)
	require.True(t, held, "a store releases its own local lease")
	res, err = stores[0].Take(ctx, req)
	require.NoError(t, err)
	require.True(t, res.Allowed, "the release freed store 0's slot")
}
