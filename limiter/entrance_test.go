package limiter_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/limiter"
)

// callCounter is a memory store that counts the calls it is given,
// leases included (lists_test.go's countingStore holds none).
type callCounter struct {
	*memorystore.Store
	calls atomic.Int64
}

func (s *callCounter) Take(ctx context.Context, req backend.Request) (backend.Result, error) {
	s.calls.Add(1)
	return s.Store.Take(ctx, req)
}

func (s *callCounter) TakeAll(ctx context.Context, reqs []backend.Request) (backend.Result, error) {
	s.calls.Add(1)
	return s.Store.TakeAll(ctx, reqs)
}

func (s *callCounter) Peek(ctx context.Context, req backend.Request) (backend.Result, error) {
	s.calls.Add(1)
	return s.Store.Peek(ctx, req)
}

func (s *callCounter) Reset(ctx context.Context, key backend.Key, rule algorithms.Rule, now time.Time) error {
	s.calls.Add(1)
	return s.Store.Reset(ctx, key, rule, time.Now())
}

func (s *callCounter) Release(ctx context.Context, req backend.Request, lease int64) (bool, error) {
	s.calls.Add(1)
	return s.Store.Release(ctx, req, lease)
}

var _ backend.LeaseStore = (*callCounter)(nil)

// TestEntranceCheck: every entrance refuses an empty key and a cost no
// enforced rule can admit, with ErrInvalidRequest and before any store
// call (the layers below trust what passed it). The control makes the same
// calls well formed: each reaches the store, so the counter counts.
func TestEntranceCheck(t *testing.T) {
	ctx := t.Context()
	mem, err := memorystore.New()
	require.NoError(t, err)
	store := &callCounter{Store: mem}
	// The guard's limit (2) is below the main one's: it bounds the cost.
	guarded, err := limiter.New(store, limiter.Config{Limit: 10, Window: time.Minute, Prefix: "g:",
		Guard: &limiter.Guard{Limit: 2, Window: time.Hour}})
	require.NoError(t, err)
	shadowed, err := limiter.New(store, limiter.Config{Limit: 3, Window: time.Minute, Prefix: "s:",
		Guard: &limiter.Guard{Limit: 1, Window: time.Hour, Mode: limiter.Shadow}})
	require.NoError(t, err)
	leases, err := limiter.New(store, limiter.Config{Algorithm: algorithms.Concurrency, Limit: 2, Window: time.Minute, Prefix: "c:"})
	require.NoError(t, err)
	comp, err := limiter.NewComposite(store, []limiter.Config{
		{Limit: 5, Window: time.Minute, Prefix: "u:"}, {Limit: 2, Window: time.Minute, Prefix: "t:"}})
	require.NoError(t, err)
	compLease, err := limiter.NewComposite(store, []limiter.Config{
		{Algorithm: algorithms.Concurrency, Limit: 2, Window: time.Minute, Prefix: "cu:"}, {Limit: 3, Window: time.Minute, Prefix: "ct:"}})
	require.NoError(t, err)
	plans, err := limiter.NewPlans(map[string]*limiter.Limiter{"g": guarded},
		func(context.Context, string) (string, error) { return "g", nil })
	require.NoError(t, err)

	decision := func(_ limiter.Decision, err error) error { return err }
	leased := func(_ *limiter.Lease, _ limiter.Decision, err error) error { return err }
	planned := func(_ limiter.Decision, _ string, err error) error { return err }
	planLeased := func(_ *limiter.Lease, _ limiter.Decision, _ string, err error) error { return err }
	lease, _, err := leases.Acquire(ctx, "held")
	require.NoError(t, err)
	id := lease.ID()

	// Each case is a call given key (an empty one, or "k") and, when
	// costs is set, a cost.
	type call func(key string, n int64) error
	cases := []struct {
		name  string
		costs bool
		do    call
	}{
		{"Allow", false, func(k string, _ int64) error { return decision(guarded.Allow(ctx, k)) }},
		{"AllowN", true, func(k string, n int64) error { return decision(guarded.AllowN(ctx, k, n)) }},
		{"AllowN shadow guard", false, func(k string, n int64) error { return decision(shadowed.AllowN(ctx, k, n)) }},
		{"Peek", false, func(k string, _ int64) error { return decision(guarded.Peek(ctx, k)) }},
		{"Reset", false, func(k string, _ int64) error { return guarded.Reset(ctx, k) }},
		{"Admit", false, func(k string, _ int64) error { return leased(guarded.Admit(ctx, limiter.Request{Keys: []string{k}})) }},
		{"AcquireN", true, func(k string, n int64) error { return leased(leases.AcquireN(ctx, k, n)) }},
		{"Admit lease", false, func(k string, _ int64) error { return leased(leases.Admit(ctx, limiter.Request{Keys: []string{k}})) }},
		{"Release", false, func(k string, _ int64) error {
			if k != "" {
				k = "held"
			}
			return leases.Release(ctx, k, id)
		}},
		{"Composite.AllowN", true, func(k string, n int64) error { return decision(comp.AllowN(ctx, []string{"alice", k}, n)) }},
		{"Composite.Peek", false, func(k string, _ int64) error { return decision(comp.Peek(ctx, k, "acme")) }},
		{"Composite.Reset", false, func(k string, _ int64) error { return comp.Reset(ctx, "alice", k) }},
		{"Composite.Admit", false, func(k string, _ int64) error {
			return leased(comp.Admit(ctx, limiter.Request{Keys: []string{k, "acme"}}))
		}},
		{"Composite.AcquireN", true, func(k string, n int64) error { return leased(compLease.AcquireN(ctx, []string{k, "acme"}, n)) }},
		{"Plans.AllowN", true, func(k string, n int64) error { return planned(plans.AllowN(ctx, k, n)) }},
		{"Plans.Admit", false, func(k string, _ int64) error {
			return planLeased(plans.Admit(ctx, limiter.Request{Keys: []string{k}}))
		}},
	}
	for _, c := range cases {
		before := store.calls.Load()
		err := c.do("", 1)
		require.ErrorIs(t, err, limiter.ErrInvalidRequest, "%s with an empty key", c.name)
		require.ErrorContains(t, err, "key is empty", c.name)
		if c.costs {
			// 3 is above the guard's, the lease's and the composite's
			// least limit.
			for _, n := range []int64{0, -1, 3} {
				err := c.do("k", n)
				require.ErrorIs(t, err, limiter.ErrInvalidRequest, "%s with cost %d", c.name, n)
				require.True(t, strings.HasPrefix(err.Error(), "limiter: "), "one prefix per package: %v", err)
			}
		}
		require.Equal(t, before, store.calls.Load(), "%s: a refused call reached the store", c.name)
		// Control: well formed, the call reaches the store.
		require.NoError(t, c.do("k", 1), c.name)
		require.Greater(t, store.calls.Load(), before, "%s: the control never reached the store", c.name)
	}

	// A cost beyond a shadow rule only is no error: a shadow denial.
	d, err := shadowed.AllowN(ctx, "k2", 3)
	require.NoError(t, err)
	require.True(t, d.Allowed && d.ShadowDenied)

	// A cost above the least enforced limit names that rule's limit.
	_, err = guarded.AllowN(ctx, "k", 3)
	require.ErrorContains(t, err, "cost 3 is above the limit 2")
	_, err = comp.AllowN(ctx, []string{"a", "b"}, 4)
	require.ErrorContains(t, err, "cost 4 is above the limit 2")
}
