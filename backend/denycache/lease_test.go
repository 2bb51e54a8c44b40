package denycache_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/denycache"
	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// leaseDenialAfterRelease runs two processes sharing a Redis: A holds the
// only lease, B is denied twice, A releases, and B asks again. It returns
// whether B's second denial came from the cache and whether B's last ask
// was admitted.
func leaseDenialAfterRelease(t *testing.T) (cached, admittedAfterRelease bool) {
	srv := redistest.Start(t)
	a, b := goredisProcess(t, srv.Addr()), rueidisProcess(t, srv.Addr())
	ctx := t.Context()
	rule := algorithms.Rule{Algorithm: algorithms.Concurrency, Limit: 1, Window: time.Hour}
	now := time.Now()
	req := backend.Request{Key: backend.Key{Prefix: "lease:", ID: "u"}, Rule: rule, Now: now, Cost: 1}
	held, err := a.cache.Take(ctx, req)
	require.NoError(t, err)
	require.True(t, held.Allowed)
	for range 2 {
		res, err := b.cache.Take(ctx, req)
		require.NoError(t, err)
		require.False(t, res.Allowed)
		require.Greater(t, res.RetryAfter, 50*time.Minute, "the denial's RetryAfter is the lease timeout")
		cached = res.Cached
	}
	ok, err := a.cache.Release(ctx, req, held.Lease)
	require.NoError(t, err)
	require.True(t, ok)
	res, err := b.cache.Take(ctx, req)
	require.NoError(t, err)
	return cached, res.Allowed
}

// TestLeaseDenialsAreNotCached: a release in another process frees a
// slot long before a concurrency denial's RetryAfter, so the cache does
// not keep such denials: the next request after the release is admitted.
// The control caches them, and the stale denial outlives the release.
func TestLeaseDenialsAreNotCached(t *testing.T) {
	t.Run("cache", func(t *testing.T) {
		cached, admitted := leaseDenialAfterRelease(t)
		require.False(t, cached, "a concurrency denial was answered from the cache")
		require.True(t, admitted, "a request after the release was denied")
	})
	t.Run("control: caching lease denials", func(t *testing.T) {
		denycache.CacheLeasesForTest(t)
		cached, admitted := leaseDenialAfterRelease(t)
		require.True(t, cached, "the control did not cache the denial")
		require.False(t, admitted, "the control should deny from its stale entry after the release")
	})
}
