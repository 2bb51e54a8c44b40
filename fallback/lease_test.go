package fallback_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/fallback"
	"github.com/limitkit/limitkit/limiter"
)

// flakyLeases is a flaky primary that holds leases.
type flakyLeases struct {
	*flaky
	leases backend.LeaseStore
}

func newFlakyLeases(t *testing.T) *flakyLeases {
	f := newFlaky(t)
	return &flakyLeases{flaky: f, leases: f.Store.(backend.LeaseStore)}
}

func (f *flakyLeases) Release(ctx context.Context, req backend.Request, lease int64) (bool, error) {
	if err := f.enter(); err != nil {
		return false, err
	}
	return f.leases.Release(ctx, req, lease)
}

func (f *flakyLeases) Renew(ctx context.Context, req backend.Request, lease int64) (backend.Result, error) {
	if err := f.enter(); err != nil {
		return backend.Result{}, err
	}
	return f.leases.Renew(ctx, req, lease)
}

var leaseRule = algorithms.Rule{Algorithm: algorithms.Concurrency, Limit: 5, Window: time.Minute}

func leaseReq(id string, p backend.FailurePolicy, now time.Time) backend.Request {
	return backend.Request{Key: backend.Key{Prefix: "fbl:", ID: id}, Rule: leaseRule, Now: now, Cost: 1, OnFailure: p}
}

// TestLeasePolicies: while the primary is down, FailOpen admits keeping no
// lease, FailClosed denies, and Local(2) grants local leases (negative
// ids), at most ceil(5/2) = 3 held per key, released and renewed on the
// local store. A primary lease's release fails with ErrUnavailable.
func TestLeasePolicies(t *testing.T) {
	ctx := t.Context()
	p := newFlakyLeases(t)
	s := newStore(t, p, fallback.WithOpenTimeout(time.Hour))
	now := time.Now()
	primaryLease, err := s.Take(ctx, leaseReq("p", backend.FailClosed, now))
	require.NoError(t, err)
	require.True(t, primaryLease.Allowed)
	require.Positive(t, primaryLease.Lease)
	p.mode.Store(failing)

	res, err := s.Take(ctx, leaseReq("u", backend.FailOpen, now))
	require.NoError(t, err)
	require.True(t, res.Allowed && res.Degraded)
	require.Zero(t, res.Lease, "failing open keeps no lease")
	res, err = s.Take(ctx, leaseReq("u", backend.FailClosed, now))
	require.NoError(t, err)
	require.False(t, res.Allowed)
	require.True(t, res.Degraded)

	local := backend.LocalPolicy(2)
	var ids []int64
	for i := range 4 {
		res, err := s.Take(ctx, leaseReq("u", local, now))
		require.NoError(t, err)
		require.True(t, res.Degraded)
		require.Equal(t, i < 3, res.Allowed, "take %d: the share is ceil(5/2) = 3", i)
		if res.Allowed {
			require.Negative(t, res.Lease, "a local lease's id is negative")
			ids = append(ids, res.Lease)
		}
	}
	calls := p.calls.Load()
	held, err := s.Release(ctx, leaseReq("u", local, now), ids[0])
	require.NoError(t, err)
	require.True(t, held)
	held, err = s.Release(ctx, leaseReq("u", local, now), ids[0])
	require.NoError(t, err)
	require.False(t, held, "released twice")
	renewed, err := s.Renew(ctx, leaseReq("u", local, now.Add(time.Second)), ids[1])
	require.NoError(t, err)
	require.True(t, renewed.Allowed && renewed.Degraded)
	require.Negative(t, renewed.Lease)
	require.NotEqual(t, ids[1], renewed.Lease)
	require.Equal(t, calls, p.calls.Load(), "local leases never reach the primary")
	res, err = s.Take(ctx, leaseReq("u", local, now))
	require.NoError(t, err)
	require.True(t, res.Allowed, "the release freed a local slot")

	_, err = s.Release(ctx, leaseReq("p", backend.FailClosed, now), primaryLease.Lease)
	require.ErrorIs(t, err, fallback.ErrUnavailable)
	_, err = s.Renew(ctx, leaseReq("p", backend.FailClosed, now), primaryLease.Lease)
	require.ErrorIs(t, err, fallback.ErrUnavailable)
}

// TestLocalLeaseReleasedLocallyAfterRecovery: a lease granted locally
// during an outage, through the limiter, is released on the local store
// after the primary is back (the primary is not asked), and frees the
// local slot; new leases come from the primary.
func TestLocalLeaseReleasedLocallyAfterRecovery(t *testing.T) {
	ctx := t.Context()
	p := newFlakyLeases(t)
	s := newStore(t, p, fallback.WithOpenTimeout(20*time.Millisecond), fallback.WithProbes(1), fallback.WithFailureThreshold(1))
	fake := clock.NewFake(time.Now())
	lim, err := limiter.New(s, limiter.Config{Algorithm: algorithms.Concurrency, Limit: 2, Window: time.Minute, Prefix: "fbl:",
		OnFailure: backend.LocalPolicy(2)}, limiter.WithClock(fake))
	require.NoError(t, err)
	p.mode.Store(failing)
	local, d, err := lim.Acquire(ctx, "u")
	require.NoError(t, err)
	require.True(t, d.Allowed && d.Degraded)
	require.Contains(t, local.ID(), "L1.-", "a local lease's id is negative")
	_, d, err = lim.Acquire(ctx, "u")
	require.NoError(t, err)
	require.False(t, d.Allowed, "the local share is ceil(2/2) = 1")

	p.mode.Store(healthy)
	waitUntilFor(t, time.Second, "the breaker closes", func() bool {
		_, err := lim.Peek(ctx, "v")
		return err == nil && s.State() == backend.BreakerClosed
	})
	remote, d, err := lim.Acquire(ctx, "u")
	require.NoError(t, err)
	require.True(t, d.Allowed && !d.Degraded)
	require.NotContains(t, remote.ID(), "L1.-")
	calls := p.calls.Load()
	require.NoError(t, local.Release(ctx))
	require.Equal(t, calls, p.calls.Load(), "the local lease was released locally")
	require.NoError(t, remote.Release(ctx))
	require.Equal(t, calls+1, p.calls.Load())

	// The local slot is free again: a new outage grants it.
	p.mode.Store(failing)
	again, d, err := lim.Acquire(ctx, "u")
	require.NoError(t, err)
	require.True(t, d.Allowed && d.Degraded)
	require.NoError(t, again.Release(ctx))
}

// TestCompositeLeaseDuringOutage: a lease taken with a rate unit through
// TakeAll while the primary is down is a local lease (negative id) of the
// local share, released on the local store.
func TestCompositeLeaseDuringOutage(t *testing.T) {
	ctx := t.Context()
	p := newFlakyLeases(t)
	p.mode.Store(failing)
	s := newStore(t, p, fallback.WithOpenTimeout(time.Hour), fallback.WithPolicy(backend.LocalPolicy(2)))
	c, err := limiter.NewComposite(s, []limiter.Config{
		{Limit: 100, Window: time.Hour, Prefix: "rate:"},
		{Algorithm: algorithms.Concurrency, Limit: 4, Window: time.Minute, Prefix: "cc:"},
	})
	require.NoError(t, err)
	var leases []*limiter.Lease
	for i := range 3 {
		lease, d, err := c.Acquire(ctx, "u", "u")
		require.NoError(t, err)
		require.True(t, d.Degraded)
		require.Equal(t, i < 2, d.Allowed, "acquire %d: the local share is ceil(4/2) = 2", i)
		if lease != nil {
			require.Contains(t, lease.ID(), "L1.-")
			leases = append(leases, lease)
		}
	}
	calls := p.calls.Load()
	require.NoError(t, leases[0].Release(ctx))
	require.Equal(t, calls, p.calls.Load(), "released on the local store")
	_, d, err := c.Acquire(ctx, "u", "u")
	require.NoError(t, err)
	require.True(t, d.Allowed, "the release freed a local slot")
}
