package fallback_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/fallback"
)

func (f *flaky) GiveBack(ctx context.Context, req backend.Request) (backend.Result, error) {
	if err := f.enter(); err != nil {
		return backend.Result{}, err
	}
	return f.Store.(backend.UnitRefunder).GiveBack(ctx, req)
}

// TestGiveBackFollowsThePrimaryThenThePolicy: units given back reach the
// primary while it answers; while it is down they reach the local store
// under a local policy, so that local limiting admits again, and under fail
// closed nothing is counted locally and nothing given back.
func TestGiveBackFollowsThePrimaryThenThePolicy(t *testing.T) {
	p := newFlaky(t)
	s := newStore(t, p, fallback.WithPolicy(backend.LocalPolicy(1)), fallback.WithOpenTimeout(time.Hour))
	rule := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 2, Window: time.Hour}
	at := time.Now()
	req := backend.Request{Key: backend.Key{Prefix: "fbgive:", ID: "u"}, Rule: rule, Now: at, Cost: 1}
	ctx := t.Context()
	take := func() backend.Result {
		res, err := s.Take(ctx, req)
		require.NoError(t, err)
		return res
	}

	// Healthy: the primary takes and gives back.
	require.True(t, take().Allowed)
	require.True(t, take().Allowed)
	require.False(t, take().Allowed)
	res, err := s.GiveBack(ctx, req)
	require.NoError(t, err)
	require.False(t, res.Degraded)
	require.Equal(t, int64(1), res.Remaining, "the primary counts one again")
	require.True(t, take().Allowed)

	// Down: the key the primary last reported spent stays refused (its
	// baseline), and giving back a unit it did not admit locally frees
	// nothing.
	p.mode.Store(failing)
	spent := take()
	require.True(t, spent.Degraded && !spent.Allowed, "the primary's last answer was: spent")
	_, err = s.GiveBack(ctx, req)
	require.NoError(t, err)
	require.False(t, take().Allowed, "units the primary counted are not given back locally")

	// A key the primary never answered for: local limiting at the share;
	// a unit given back reaches the local store.
	req.Key.ID = "w"
	require.True(t, take().Degraded)
	require.True(t, take().Allowed)
	denied := take()
	require.True(t, denied.Degraded && !denied.Allowed, "the local share (2) is used up")
	res, err = s.GiveBack(ctx, req)
	require.NoError(t, err)
	require.True(t, res.Degraded)
	require.Equal(t, int64(1), res.Remaining)
	require.True(t, take().Allowed, "the unit given back is admitted again locally")

	// Fail closed: nothing local to give back to.
	closed := req
	closed.OnFailure = backend.FailClosed
	res, err = s.GiveBack(ctx, closed)
	require.NoError(t, err)
	require.True(t, res.Degraded && !res.Allowed)

	// An algorithm that cannot give units back (leases) is refused, up or
	// down.
	bad := req
	bad.Rule.Algorithm = algorithms.Concurrency
	_, err = s.GiveBack(ctx, bad)
	require.ErrorIs(t, err, algorithms.ErrInvalidRequest)
}
