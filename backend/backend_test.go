package backend_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
)

func TestValidateAllOneLease(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	lease := algorithms.Rule{Algorithm: algorithms.Concurrency, Limit: 2, Window: time.Second}
	rate := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 2, Window: time.Second}
	req := func(prefix string, r algorithms.Rule) backend.Request {
		return backend.Request{Key: backend.Key{Prefix: prefix, ID: "u"}, Rule: r, Now: now, Cost: 1}
	}
	require.NoError(t, backend.ValidateAll([]backend.Request{req("a:", rate), req("b:", lease), req("c:", rate)}))
	err := backend.ValidateAll([]backend.Request{req("a:", lease), req("b:", rate), req("c:", lease)})
	require.ErrorIs(t, err, algorithms.ErrInvalidRequest)
	require.ErrorContains(t, err, "requests 0 and 2 are both concurrency leases")
	require.ErrorContains(t, err, "in a call of its own")
}

// TestValidateAllNamesTheRequest: a bad request is named after the
// sentinel its error wraps, which stays first in the message.
func TestValidateAllNamesTheRequest(t *testing.T) {
	rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 2, Window: time.Second}
	good := backend.Request{Key: backend.Key{Prefix: "a:", ID: "u"}, Rule: rule, Now: time.UnixMilli(5), Cost: 1}
	emptyKey := good
	emptyKey.Key = backend.Key{Prefix: "b:"}
	err := backend.ValidateAll([]backend.Request{good, emptyKey})
	require.ErrorIs(t, err, algorithms.ErrInvalidRequest)
	require.EqualError(t, err, "limitkit: invalid request: request 1: key is empty")
	badRule := good
	badRule.Key.Prefix, badRule.Rule.Limit = "c:", 0
	err = backend.ValidateAll([]backend.Request{good, badRule})
	require.ErrorIs(t, err, algorithms.ErrInvalidRule)
	require.EqualError(t, err, "limitkit: invalid rule: request 1: limit is 0; it must be at least 1")
}

func TestValidateLease(t *testing.T) {
	req := backend.Request{Key: backend.Key{ID: "u"}, Rule: algorithms.Rule{Algorithm: algorithms.GCRA, Limit: 2, Window: time.Second}, Now: time.UnixMilli(5), Cost: 1}
	require.ErrorIs(t, backend.ValidateLease(&req), algorithms.ErrInvalidRequest)
	req.Rule.Algorithm = algorithms.Concurrency
	require.NoError(t, backend.ValidateLease(&req))
	req.Cost = 3
	require.ErrorIs(t, backend.ValidateLease(&req), algorithms.ErrInvalidRequest)
}

// TestValidateLeaseTime: a concurrency request is decided up to
// MaxLeaseMillis (its ids, 1/1000 ms, stay below 2^53: about June 2255) and
// refused after it with an error naming the bound; a rate limit's is not.
func TestValidateLeaseTime(t *testing.T) {
	require.Equal(t, "2255-06-05", time.UnixMilli(algorithms.MaxLeaseMillis).UTC().Format(time.DateOnly))
	require.Less(t, algorithms.MaxLeaseMillis*1000, int64(1)<<53)
	require.GreaterOrEqual(t, (algorithms.MaxLeaseMillis+1)*1000, int64(1)<<53)
	req := backend.Request{Key: backend.Key{ID: "u"}, Rule: algorithms.Rule{Algorithm: algorithms.Concurrency, Limit: 2, Window: time.Second},
		Now: time.UnixMilli(algorithms.MaxLeaseMillis), Cost: 1}
	require.NoError(t, req.Validate())
	req.Now = req.Now.Add(time.Millisecond)
	err := req.Validate()
	require.ErrorIs(t, err, algorithms.ErrInvalidRequest)
	require.ErrorContains(t, err, "is after 2255-06-05 23:47:34.74 +0000 UTC, the last a concurrency rule can decide at")
	req.Rule.Algorithm = algorithms.SlidingLog
	require.NoError(t, req.Validate())
}

func TestCombineCarriesTheLease(t *testing.T) {
	results := []backend.Result{
		{Allowed: true, Limit: 5, Remaining: 1},
		{Allowed: true, Limit: 2, Remaining: 1, Lease: 42},
	}
	got := backend.Combine(results)
	require.True(t, got.Allowed)
	require.Equal(t, int64(42), got.Lease)
	require.Equal(t, 0, got.Rule)
	results[0].Allowed, results[0].RetryAfter = false, time.Second
	got = backend.Combine(results)
	require.False(t, got.Allowed)
	require.Zero(t, got.Lease)
}
