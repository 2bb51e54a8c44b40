package fallback_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/storetest"
	"github.com/limitkit/limitkit/fallback"
	"github.com/limitkit/limitkit/limiter"
)

func (f *flaky) TakeAll(ctx context.Context, reqs []backend.Request) (backend.Result, error) {
	if err := f.enter(); err != nil {
		return backend.Result{}, err
	}
	return f.Store.TakeAll(ctx, reqs)
}

// TakeEach is TakeAll with each request's result, as the store underneath
// gives them.
func (f *flaky) TakeEach(ctx context.Context, reqs []backend.Request) (backend.Result, []backend.Result, error) {
	if err := f.enter(); err != nil {
		return backend.Result{}, nil, err
	}
	return backend.TakeEach(ctx, f.Store, reqs)
}

func TestConformanceHealthy(t *testing.T) {
	// A minute's deadline: a primary in memory that a loaded machine runs
	// late must not read as degraded answers.
	storetest.Run(t, newStore(t, newFlakyLeases(t), fallback.WithTimeout(time.Minute)))
}

// pair is a payment limit with a guard: the main rule goes local while the
// primary is down, the guard follows its own policy.
func pair(guardPolicy backend.FailurePolicy) []backend.Request {
	main := req("acct")
	main.OnFailure = backend.LocalPolicy(1)
	guard := req("acct")
	guard.Key.Prefix = "fb:guard:"
	guard.Rule = algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 3, Window: time.Hour}
	guard.OnFailure = guardPolicy
	return []backend.Request{main, guard}
}

func TestTakeAllFollowsEachRequestsPolicy(t *testing.T) {
	p := newFlaky(t)
	p.mode.Store(failing)
	s := newStore(t, p, fallback.WithPolicy(backend.FailOpen), fallback.WithOpenTimeout(time.Hour))
	ctx := t.Context()

	// The guard fails closed: nothing is admitted, whatever the main rule says.
	res, err := s.TakeAll(ctx, pair(backend.FailClosed))
	require.NoError(t, err)
	require.False(t, res.Allowed)
	require.True(t, res.Degraded)
	require.Equal(t, 1, res.Rule)
	require.Positive(t, res.RetryAfter)

	// The guard goes local too: both rules decided together on the local
	// store, the guard's 3 binding first.
	admitted := 0
	for range 5 {
		res, err := s.TakeAll(ctx, pair(backend.LocalPolicy(1)))
		require.NoError(t, err)
		require.True(t, res.Degraded)
		if res.Allowed {
			admitted++
		} else {
			require.Equal(t, 1, res.Rule, "the guard denies")
		}
	}
	require.Equal(t, 3, admitted)

	// A request with no policy of its own follows the store's (fail open):
	// only the main rule's local count limits.
	reqs := pair(backend.FailurePolicy{})
	reqs[0].OnFailure = backend.FailurePolicy{}
	res, err = s.TakeAll(ctx, reqs)
	require.NoError(t, err)
	require.True(t, res.Allowed && res.Degraded)

	// Healthy again: the primary decides and nothing is degraded.
	p.mode.Store(healthy)
	s2 := newStore(t, p)
	res, err = s2.TakeAll(ctx, pair(backend.FailClosed))
	require.NoError(t, err)
	require.True(t, res.Allowed)
	require.False(t, res.Degraded)
}

// TestLimiterPoliciesReachTheFallback: a limiter's OnFailure and its
// guard's reach the fallback store through the requests.
func TestLimiterPoliciesReachTheFallback(t *testing.T) {
	p := newFlaky(t)
	p.mode.Store(failing)
	s := newStore(t, p, fallback.WithOpenTimeout(time.Hour)) // default: Local(1)
	login, err := limiter.New(s, limiter.Config{Limit: 5, Window: time.Minute, Prefix: "login:", OnFailure: backend.FailOpen})
	require.NoError(t, err)
	pay, err := limiter.New(s, limiter.Config{Limit: 5, Window: time.Minute, Prefix: "pay:",
		Guard: &limiter.Guard{Limit: 100, Window: 24 * time.Hour, OnFailure: backend.FailClosed}})
	require.NoError(t, err)
	for range 10 {
		d, err := login.Allow(t.Context(), "u")
		require.NoError(t, err)
		require.True(t, d.Allowed && d.Degraded, "login fails open")
		d, err = pay.Allow(t.Context(), "u")
		require.NoError(t, err)
		require.False(t, d.Allowed, "the payment guard fails closed")
		require.Equal(t, limiter.GuardRule, d.Rule)
	}
}

// TestDegradedTakeAllDescribesEachRequest: while the primary is down, a
// TakeEach's each still holds one entry per request, in request
// order: the local store's for the rules decided locally, the policy's for
// the others (the Envoy service reads every descriptor's status from it).
func TestDegradedTakeAllDescribesEachRequest(t *testing.T) {
	p := newFlaky(t)
	p.mode.Store(failing)
	s := newStore(t, p, fallback.WithOpenTimeout(time.Hour))
	ctx := t.Context()

	// Both local: the local store's own Each.
	res, each, err := s.TakeEach(ctx, pair(backend.LocalPolicy(1)))
	require.NoError(t, err)
	require.True(t, res.Allowed && res.Degraded)
	require.Len(t, each, 2)
	main := pair(backend.FailOpen)[0].Rule.Limit
	require.Equal(t, main-1, each[0].Remaining, "the main rule after one")
	require.Equal(t, int64(2), each[1].Remaining, "the guard (3 an hour) after one")
	for _, e := range each {
		require.True(t, e.Allowed && e.Degraded)
	}

	// The guard fails open: the main rule is decided locally (one request
	// there), the guard by its policy, each in its place.
	res, each, err = s.TakeEach(ctx, pair(backend.FailOpen))
	require.NoError(t, err)
	require.True(t, res.Allowed && res.Degraded)
	require.Len(t, each, 2)
	require.Equal(t, main-2, each[0].Remaining, "the main rule, locally, after two")
	require.Equal(t, backend.Result{Allowed: true, Limit: 3, Degraded: true}, each[1], "the guard, failing open")
}
