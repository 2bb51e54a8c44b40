package denycache_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// TestUnreserveEndsDenialsEverywhere: process A reserves a key's whole
// limit; process B is denied and caches the denial; A's refund
// (Unreserve) reaches B's cache, which asks the store again and is
// admitted, well before its cached RetryAfter (an hour). Without the
// announcement (checked by hand: remove announceRefund from Unreserve)
// B stays denied and the test fails.
func TestUnreserveEndsDenialsEverywhere(t *testing.T) {
	srv := redistest.Start(t)
	a, b := goredisProcess(t, srv.Addr()), rueidisProcess(t, srv.Addr())
	rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 3, Window: time.Hour}
	key := backend.Key{Prefix: "rsvrefund:", ID: "k"}
	req := func(cost int64) backend.Request {
		return backend.Request{Key: key, Rule: rule, Now: time.Now(), Cost: cost}
	}
	res, at, err := a.cache.Reserve(t.Context(), req(3))
	require.NoError(t, err)
	require.True(t, res.Allowed)
	d, err := b.cache.Take(t.Context(), req(1))
	require.NoError(t, err)
	require.False(t, d.Allowed)
	d, err = b.cache.Take(t.Context(), req(1))
	require.NoError(t, err)
	require.True(t, d.Cached, "B caches the denial")

	_, err = a.cache.Unreserve(t.Context(), req(3), at)
	require.NoError(t, err)
	admitted := false
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && !admitted; time.Sleep(5 * time.Millisecond) {
		d, err = b.cache.Take(t.Context(), req(1))
		require.NoError(t, err)
		admitted = d.Allowed
	}
	require.True(t, admitted, "A's refund did not end B's cached denial")
}
