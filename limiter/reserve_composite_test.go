package limiter_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
)

// compositeReserveConfigs are a per-user limit of 10 and a global one of 8.
var compositeReserveConfigs = []limiter.Config{
	{Algorithm: algorithms.CompactLog, Limit: 10, Window: 10 * time.Second, Prefix: "crsv:user:"},
	{Algorithm: algorithms.FixedWindow, Limit: 8, Window: 10 * time.Second, Prefix: "crsv:all:"},
}

// compositeReserveScenario reserves, refuses, settles below and above the
// estimate and cancels on a composite of compositeReserveConfigs, checking
// each limit's count through limiters of the same configs. It returns what
// bob's user limit has left after a reservation the global limit refused:
// 10 when the refusal held nothing.
func compositeReserveScenario(t *testing.T, store backend.Store) int64 {
	ctx := t.Context()
	fake := clock.NewFake(liveStart)
	c, err := limiter.NewComposite(store, compositeReserveConfigs, limiter.WithClock(fake))
	require.NoError(t, err)
	var each [2]*limiter.Limiter
	for i, cfg := range compositeReserveConfigs {
		each[i], err = limiter.New(store, cfg, limiter.WithClock(fake))
		require.NoError(t, err)
	}
	left := func(i int, key string) int64 {
		d, err := each[i].Peek(ctx, key)
		require.NoError(t, err)
		return d.Remaining
	}
	reserve := func(user string, n int64) *limiter.Reservation {
		r, d, err := c.ReserveN(ctx, []string{user, "all"}, n)
		require.NoError(t, err)
		require.True(t, d.Allowed, "reserve %d for %s: %+v", n, user, d)
		return r
	}

	alice := reserve("alice", 4)
	require.Equal(t, int64(6), left(0, "alice"))
	require.Equal(t, int64(4), left(1, "all"))

	r, d, err := c.ReserveN(ctx, []string{"bob", "all"}, 5)
	require.NoError(t, err)
	require.Nil(t, r)
	require.False(t, d.Allowed)
	require.Equal(t, 1, d.Rule, "refused by the global limit")
	bob := left(0, "bob")
	require.Equal(t, int64(4), left(1, "all"))

	_, err = alice.Settle(ctx, 2)
	require.NoError(t, err)
	require.Equal(t, int64(8), left(0, "alice"), "refund on the user limit")
	require.Equal(t, int64(6), left(1, "all"), "refund on the global limit")

	dave := reserve("dave", 1)
	require.NoError(t, dave.Cancel(ctx))
	require.Equal(t, int64(10), left(0, "dave"))
	require.Equal(t, int64(6), left(1, "all"))

	carol := reserve("carol", 3)
	d, err = carol.Settle(ctx, 7)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Zero(t, d.Remaining, "the global limit is in debt")
	require.Equal(t, int64(3), left(0, "carol"), "the excess charged on the user limit")
	require.Zero(t, left(1, "all"))
	got, err := c.Allow(ctx, "eve", "all")
	require.NoError(t, err)
	require.False(t, got.Allowed, "the global debt refuses")
	_, err = carol.Settle(ctx, 1)
	require.ErrorIs(t, err, limiter.ErrReservationSettled)
	return bob
}

// TestCompositeReserveN: a composite reserves on every limit, all or
// nothing, and Settle and Cancel apply to each. The control is a store
// whose refunds give nothing back: the units the refused reservation held
// on bob's user limit stay, and the scenario sees them.
func TestCompositeReserveN(t *testing.T) {
	everyStore(t, func(t *testing.T, store backend.Store) {
		require.Equal(t, int64(10), compositeReserveScenario(t, store), "the refused reservation held units on bob's limit")
	})
	t.Run("control", func(t *testing.T) {
		m, err := memorystore.New()
		require.NoError(t, err)
		ctx := t.Context()
		fake := clock.NewFake(liveStart)
		c, err := limiter.NewComposite(noRefunds{m}, compositeReserveConfigs, limiter.WithClock(fake))
		require.NoError(t, err)
		_, _, err = c.ReserveN(ctx, []string{"bob", "all"}, 5)
		require.NoError(t, err)
		_, _, err = c.ReserveN(ctx, []string{"bob", "all"}, 5) // the global limit refuses
		require.NoError(t, err)
		user, err := limiter.New(m, compositeReserveConfigs[0], limiter.WithClock(fake))
		require.NoError(t, err)
		d, err := user.Peek(ctx, "bob")
		require.NoError(t, err)
		require.Equal(t, int64(0), d.Remaining, "the control kept the refused reservation's units")
	})
}

// noRefunds is a store whose Unreserve gives nothing back.
type noRefunds struct{ *memorystore.Store }

func (s noRefunds) Unreserve(ctx context.Context, req backend.Request, _ int64) (backend.Result, error) {
	return s.Peek(ctx, req)
}

// TestCompositeReserveNRefused: a composite with a concurrency limit, one
// in Shadow mode, or one of more keys than limits cannot reserve.
func TestCompositeReserveNRefused(t *testing.T) {
	store, err := memorystore.New()
	require.NoError(t, err)
	for name, cfgs := range map[string][]limiter.Config{
		"concurrency": {{Limit: 5, Window: time.Second, Prefix: "a:"}, {Algorithm: algorithms.Concurrency, Limit: 2, Window: time.Minute, Prefix: "b:"}},
		"shadow":      {{Limit: 5, Window: time.Second, Prefix: "a:"}, {Limit: 5, Window: time.Second, Prefix: "b:", Mode: limiter.Shadow}},
	} {
		c, err := limiter.NewComposite(store, cfgs)
		require.NoError(t, err)
		_, _, err = c.ReserveN(t.Context(), []string{"k", "k"}, 1)
		require.True(t, errors.Is(err, limiter.ErrInvalidRequest), "%s: %v", name, err)
	}
	c, err := limiter.NewComposite(store, compositeReserveConfigs)
	require.NoError(t, err)
	_, _, err = c.ReserveN(t.Context(), []string{"k"}, 1)
	require.ErrorIs(t, err, limiter.ErrInvalidRequest)
}

// TestPlansReserveN: the reservation is made and settled on the key's plan.
func TestPlansReserveN(t *testing.T) {
	store, err := memorystore.New()
	require.NoError(t, err)
	ctx := t.Context()
	free, err := limiter.New(store, limiter.Config{Limit: 2, Window: time.Minute, Prefix: "rp:free:"})
	require.NoError(t, err)
	pro, err := limiter.New(store, limiter.Config{Limit: 5, Window: time.Minute, Prefix: "rp:pro:"})
	require.NoError(t, err)
	plans, err := limiter.NewPlans(map[string]*limiter.Limiter{"free": free, "pro": pro},
		func(context.Context, string) (string, error) { return "pro", nil })
	require.NoError(t, err)
	r, d, name, err := plans.ReserveN(ctx, "acme", 3)
	require.NoError(t, err)
	require.Equal(t, "pro", name)
	require.True(t, d.Allowed)
	require.Equal(t, int64(2), d.Remaining)
	_, err = r.Settle(ctx, 1)
	require.NoError(t, err)
	got, err := pro.Peek(ctx, "acme")
	require.NoError(t, err)
	require.Equal(t, int64(4), got.Remaining)
	got, err = free.Peek(ctx, "acme")
	require.NoError(t, err)
	require.Equal(t, int64(2), got.Remaining, "the free plan was not touched")
}
