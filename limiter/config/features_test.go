package config

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// featuresFile has a deny cache under a fallback, a rate limit and a
// concurrency limit (leases); %s is the URL, %s the client.
const featuresFile = `
backend:
  url: %s
  client: %s
  deny_cache: {max_entries: 1000, probe_interval: 50ms, channel: "test:denycache"}
  fallback: {timeout: 2s}
policies:
  api: {limit: 1, window: 1m}
  uploads: {algorithm: concurrency, limit: 2, window: 30s}
`

func buildFeatures(t *testing.T, url, client string) *Set {
	t.Helper()
	cfg, err := Parse(fmt.Appendf(nil, featuresFile, url, client), YAML)
	require.NoError(t, err)
	require.Equal(t, &DenyCache{MaxEntries: 1000, ProbeInterval: 50 * time.Millisecond, Channel: "test:denycache"}, cfg.Backend.DenyCache)
	set, err := cfg.Build(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, set.Close()) })
	require.NotNil(t, set.DenyCache())
	require.NotNil(t, set.Fallback())
	require.Same(t, set.Fallback(), set.Store())
	return set
}

// TestDenyCacheFromFile: deny_cache puts a deny cache under the fallback,
// invalidated over the store's own client: a repeated denial is answered
// from it, and a Reset by another Set (another process) on the same Redis
// reaches it over pub/sub, so the key is admitted again. Leases of a
// concurrency policy go through the whole stack. With both clients.
func TestDenyCacheFromFile(t *testing.T) {
	srv := redistest.Start(t)
	for _, client := range []string{GoRedis, Rueidis} {
		t.Run(client, func(t *testing.T) {
			url := "redis://" + srv.Addr() + "/0"
			a, b := buildFeatures(t, url, client), buildFeatures(t, url, client)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			require.NoError(t, a.DenyCache().Ready(ctx))
			key := "user-" + client
			d, err := a.Limiter("api").Allow(ctx, key)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			for range 3 {
				d, err = a.Limiter("api").Allow(ctx, key)
				require.NoError(t, err)
				require.False(t, d.Allowed)
			}
			require.Positive(t, a.DenyCache().Stats().Hits, "repeated denials answered from the cache")

			require.NoError(t, b.Limiter("api").Reset(ctx, key))
			admitted := false
			for i := 0; i < 200 && !admitted; i++ { // bounded: at most 200 x 10ms
				d, err = a.Limiter("api").Allow(ctx, key)
				require.NoError(t, err)
				admitted = d.Allowed
				if !admitted {
					time.Sleep(10 * time.Millisecond)
				}
			}
			require.True(t, admitted, "the other process's reset reached the cache")
			require.Positive(t, a.DenyCache().Stats().Invalidations)

			// Leases: two held at most, a release frees one, in any Set.
			up := a.Limiter("uploads")
			l1, d, err := up.Acquire(ctx, key)
			require.NoError(t, err)
			require.NotNil(t, l1, "%+v", d)
			l2, _, err := b.Limiter("uploads").Acquire(ctx, key)
			require.NoError(t, err)
			require.NotNil(t, l2)
			l3, d, err := up.Acquire(ctx, key)
			require.NoError(t, err)
			require.Nil(t, l3)
			require.False(t, d.Allowed)
			require.NoError(t, b.Limiter("uploads").Release(ctx, key, l1.ID()))
			l3, _, err = up.Acquire(ctx, key)
			require.NoError(t, err)
			require.NotNil(t, l3, "the release (by id, from the other Set) freed a slot at once")
			require.NoError(t, l2.Release(ctx))
			require.NoError(t, l3.Release(ctx))
		})
	}
}

// TestDenyCacheOnMemory: memory:// takes a deny cache too (no bus: no
// other process shares the state), and bad deny_cache values are errors
// at their line.
func TestDenyCacheOnMemory(t *testing.T) {
	cfg, err := Parse([]byte("backend: {url: 'memory://', deny_cache: {}}\npolicies: {a: {limit: 1, window: 1m}}\n"), YAML)
	require.NoError(t, err)
	set, err := cfg.Build(context.Background())
	require.NoError(t, err)
	defer set.Close()
	require.NotNil(t, set.DenyCache())
	for range 3 {
		_, err := set.Limiter("a").Allow(context.Background(), "k")
		require.NoError(t, err)
	}
	require.Positive(t, set.DenyCache().Stats().Hits)

	_, err = Parse([]byte("backend:\n  url: 'memory://'\n  deny_cache:\n    max_entries: 10\n    probe_interval: 0.5ms\n    chanel: x\n"+
		"policies: {a: {limit: 1, window: 1m}}\n"), YAML)
	require.ErrorContains(t, err, "line 4: backend.deny_cache.max_entries: is 10; it must be at least 64")
	require.ErrorContains(t, err, "line 5: backend.deny_cache.probe_interval: is 500µs; it must be at least 1ms")
	require.ErrorContains(t, err, `line 6: backend.deny_cache.chanel: unknown field (did you mean "channel"?)`)
}
