package redisengine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/internal/redisengine"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// TestUnreserveOfAnEarlierWindow: a fixed window's refund is sent to the
// key of the window its take counted in (issue 43, item 13), so when the
// refund comes a window later its script read that window's key; the
// store reports the window of now, as the Go engine (the memory store)
// does. The control reports what the script read: caught.
func TestUnreserveOfAnEarlierWindow(t *testing.T) {
	srv := redistest.Start(t)
	rule := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 5, Window: time.Minute}
	w := rule.Window.Milliseconds()
	base := time.Now().UnixMilli()
	base = base - base%w + 2*w
	// sequence reserves 3 in one window, takes 1 in the next, then gives
	// the reservation back, and returns the refund's and a late take's
	// results.
	sequence := func(t *testing.T, s backend.Store, id string) (backend.Result, backend.Result) {
		rs, ok := backend.As[backend.Reserver](s)
		require.True(t, ok)
		req := backend.Request{Key: backend.Key{Prefix: "unreservewindow:", ID: id}, Rule: rule, Now: time.UnixMilli(base + 10), Cost: 3}
		res, at, err := rs.Reserve(t.Context(), req)
		require.NoError(t, err)
		require.True(t, res.Allowed)
		next := req
		next.Now, next.Cost = time.UnixMilli(base+w+10), 1
		res, err = s.Take(t.Context(), next)
		require.NoError(t, err)
		require.True(t, res.Allowed)
		next.Cost = 3
		refund, err := rs.Unreserve(context.Background(), next, at)
		require.NoError(t, err)
		late := req
		late.Now, late.Cost = time.UnixMilli(base+w-1), 5
		lateRes, err := s.Take(t.Context(), late)
		require.NoError(t, err)
		return refund, lateRes
	}
	mem, err := memorystore.New()
	require.NoError(t, err)
	wantRefund, wantLate := sequence(t, mem, "memory")
	require.EqualValues(t, 4, wantRefund.Remaining, "the Go engine: one of five taken in the window of now")
	require.True(t, wantLate.Allowed, "the Go engine: the refund went to the earlier window")

	all := stores(t, srv, nil, nil) // go-redis, rueidis, go-redis, rueidis
	for name, s := range map[string]backend.Store{"goredis": all[0], "rueidis": all[1]} {
		t.Run(name, func(t *testing.T) {
			refund, late := sequence(t, s, name)
			require.Equal(t, wantRefund, refund, "the refund's report")
			require.Equal(t, wantLate, late, "a late take in the refunded window")
			restore := redisengine.SetSkipRefundPeek(true)
			defer restore()
			refund, _ = sequence(t, s, name+":control")
			require.NotEqual(t, wantRefund, refund, "control: the report of the earlier window's key passed")
		})
	}
}
