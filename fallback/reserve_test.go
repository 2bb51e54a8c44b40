package fallback_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/fallback"
)

// flakyReserver is a flaky primary that reserves.
type flakyReserver struct{ *flaky }

func (f flakyReserver) Reserve(ctx context.Context, req backend.Request) (backend.Result, int64, error) {
	if err := f.enter(); err != nil {
		return backend.Result{}, 0, err
	}
	return f.Store.(backend.Reserver).Reserve(ctx, req)
}

func (f flakyReserver) Unreserve(ctx context.Context, req backend.Request, at int64) (backend.Result, error) {
	if err := f.enter(); err != nil {
		return backend.Result{}, err
	}
	return f.Store.(backend.Reserver).Unreserve(ctx, req, at)
}

// TestUnreserveQueuedWhileOpen: a primary reservation settled while the
// breaker is open is not lost: its refund is queued and reaches the
// primary after the next call it answers. A local reservation is refunded
// to the local store.
func TestUnreserveQueuedWhileOpen(t *testing.T) {
	p := flakyReserver{newFlaky(t)}
	s := newStore(t, p, fallback.WithPolicy(backend.LocalPolicy(1)), fallback.WithFailureThreshold(1), fallback.WithOpenTimeout(20*time.Millisecond))
	ctx := t.Context()
	r := req("q")
	r.Cost = 5
	res, at, err := s.Reserve(ctx, r)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	require.False(t, res.Degraded)

	p.mode.Store(failing)
	_, _ = s.Take(ctx, req("trip")) // opens the breaker
	require.Equal(t, backend.BreakerOpen, s.State())
	res, err = s.Unreserve(ctx, r, at)
	require.NoError(t, err)
	require.True(t, res.Degraded)
	waiting, _ := s.QueuedRefunds()
	require.Equal(t, 1, waiting)
	peek, err := p.Store.Peek(ctx, req("q"))
	require.NoError(t, err)
	require.Equal(t, int64(5), peek.Remaining, "not applied while the primary is away")

	// A reservation the local store made is refunded there.
	lr, lat, err := s.Reserve(ctx, r)
	require.NoError(t, err)
	require.True(t, lr.Degraded)
	require.True(t, lr.Allowed)
	_, err = s.Unreserve(ctx, r, lat)
	require.NoError(t, err)

	p.mode.Store(healthy)
	deadline := time.Now().Add(5 * time.Second)
	for {
		res, _, err = s.Reserve(ctx, req("z"))
		require.NoError(t, err)
		if !res.Degraded || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	require.False(t, res.Degraded, "the primary never answered again")
	waiting, dropped := s.QueuedRefunds()
	require.Zero(t, waiting)
	require.Zero(t, dropped)
	peek, err = p.Store.Peek(ctx, req("q"))
	require.NoError(t, err)
	require.Equal(t, int64(10), peek.Remaining, "the queued refund reached the primary")
}
