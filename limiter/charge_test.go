package limiter_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
)

// TestChargeN: on 1000 per hour, four charges of 300 (and, on a fresh
// key, one of 1200) leave the key in debt: Remaining 0, and Allow refused.
// The control is three charges of 300, after which Allow admits.
func TestChargeN(t *testing.T) {
	ctx := context.Background()
	for _, alg := range []string{"fixed_window", "sliding_log", "sliding_counter", "gcra"} {
		store, err := memorystore.New()
		require.NoError(t, err)
		fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		lim, err := limiter.New(store, limiter.Config{Algorithm: algorithms.Name(alg), Limit: 1000, Window: time.Hour}, limiter.WithClock(fake))
		require.NoError(t, err)
		for key, charges := range map[string][]int64{"four": {300, 300, 300, 300}, "one": {1200}, "control": {300, 300, 300}} {
			var d limiter.Decision
			for _, n := range charges {
				d, err = lim.ChargeN(ctx, key, n)
				require.NoError(t, err, alg)
				require.True(t, d.Allowed, "%s: a charge is recorded", alg)
				require.GreaterOrEqual(t, d.Remaining, int64(0), alg)
			}
			got, err := lim.Allow(ctx, key)
			require.NoError(t, err)
			if key == "control" {
				require.True(t, got.Allowed, "%s: control: 900 of 1000 charged, Allow admits", alg)
				continue
			}
			require.Zero(t, d.Remaining, "%s %s: in debt", alg, key)
			require.False(t, got.Allowed, "%s %s: Allow after the budget was overspent", alg, key)
		}
	}
}

// TestChargeNRefused: a concurrency limit refuses ChargeN, with
// ErrInvalidRequest.
func TestChargeNRefused(t *testing.T) {
	store, err := memorystore.New()
	require.NoError(t, err)
	for _, alg := range []string{"concurrency"} {
		lim, err := limiter.New(store, limiter.Config{Algorithm: algorithms.Name(alg), Limit: 10, Window: time.Minute})
		require.NoError(t, err)
		_, err = lim.ChargeN(context.Background(), "k", 3)
		require.True(t, errors.Is(err, limiter.ErrInvalidRequest), "%s: %v", alg, err)
	}
}
