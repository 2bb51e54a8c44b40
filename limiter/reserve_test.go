package limiter_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
)

func reserveConfig(alg algorithms.Name) limiter.Config {
	return limiter.Config{Algorithm: alg, Limit: 10, Window: 10 * time.Second, Prefix: "rsv:", ReservationTimeout: time.Minute}
}

// reserved reserves n units that must be admitted.
func reserved(t *testing.T, lim *limiter.Limiter, key string, n int64) *limiter.Reservation {
	t.Helper()
	r, d, err := lim.ReserveN(t.Context(), key, n)
	require.NoError(t, err)
	require.True(t, d.Allowed, "denied: %+v", d)
	require.NotNil(t, r)
	return r
}

// refundScenario reserves 6 at t0, admits 3 at t0+1s, settles the
// reservation at 1 at t0+2s with settle, and returns what a Peek reports
// remaining once the reservation's units slid out (t0+10.5s) and the 3 still
// count: 7 when the reservation's own 5 units were given back.
func refundScenario(t *testing.T, store backend.Store, key string, settle func(*limiter.Reservation, *limiter.Limiter, *clock.Fake)) int64 {
	fake := clock.NewFake(liveStart)
	lim, err := limiter.New(store, reserveConfig(algorithms.SlidingLog), limiter.WithClock(fake))
	require.NoError(t, err)
	r := reserved(t, lim, key, 6)
	fake.Advance(time.Second)
	d, err := lim.AllowN(t.Context(), key, 3)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	fake.Advance(time.Second)
	settle(r, lim, fake)
	fake.Advance(8500 * time.Millisecond)
	d, err = lim.Peek(t.Context(), key)
	require.NoError(t, err)
	return d.Remaining
}

// TestSettleRefundsItsOwnUnits: a settle below the estimate gives back the
// reservation's units, not the newest: once they would have slid out,
// the units admitted after the reservation still count. The control gives
// back by time (the newest units, GiveBack) and is caught: it frees the
// later units and leaves the reservation's, so the key reads 10 left
// where 3 are still counted.
func TestSettleRefundsItsOwnUnits(t *testing.T) {
	everyStore(t, func(t *testing.T, store backend.Store) {
		got := refundScenario(t, store, "own", func(r *limiter.Reservation, _ *limiter.Limiter, _ *clock.Fake) {
			d, err := r.Settle(t.Context(), 1)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			require.Equal(t, int64(6), d.Remaining, "10 - 1 settled - 3 admitted")
		})
		require.Equal(t, int64(7), got, "the 3 units admitted after the reservation still count")
		control := refundScenario(t, store, "newest", func(r *limiter.Reservation, lim *limiter.Limiter, fake *clock.Fake) {
			u, ok := backend.As[backend.UnitRefunder](store)
			require.True(t, ok)
			cfg := lim.Config()
			_, err := u.GiveBack(t.Context(), backend.Request{Key: backend.Key{Prefix: cfg.Prefix, ID: "newest"},
				Rule: algorithms.Rule{Algorithm: cfg.Algorithm, Limit: cfg.Limit, Window: cfg.Window}, Now: fake.Now(), Cost: 5})
			require.NoError(t, err)
		})
		require.Equal(t, int64(10), control, "the control (a refund of the newest units) must over-admit")
	})
}

// TestReservationOnce: Settle and Cancel run once; a reservation not
// settled within its timeout ends counting its estimate, and settling it
// then changes nothing.
func TestReservationOnce(t *testing.T) {
	everyStore(t, func(t *testing.T, store backend.Store) {
		fake := clock.NewFake(liveStart)
		lim, err := limiter.New(store, reserveConfig(algorithms.FixedWindow), limiter.WithClock(fake))
		require.NoError(t, err)
		r := reserved(t, lim, "a", 4)
		require.Equal(t, "a", r.Key())
		require.Equal(t, int64(4), r.Estimate())
		require.Equal(t, liveStart.Add(time.Minute), r.Expires())
		require.NoError(t, r.Cancel(t.Context()))
		d, err := lim.Peek(t.Context(), "a")
		require.NoError(t, err)
		require.Equal(t, int64(10), d.Remaining, "cancelled: all given back")
		_, err = r.Settle(t.Context(), 1)
		require.ErrorIs(t, err, limiter.ErrReservationSettled)
		require.ErrorIs(t, r.Cancel(t.Context()), limiter.ErrReservationSettled)

		fake.Set(liveStart.Add(20 * time.Minute)) // another window
		r = reserved(t, lim, "a", 4)
		fake.Advance(time.Minute + time.Millisecond)
		_, err = r.Settle(t.Context(), 0)
		require.ErrorIs(t, err, limiter.ErrReservationExpired)
		_, err = r.Settle(t.Context(), 0)
		require.ErrorIs(t, err, limiter.ErrReservationSettled)
		_, err = r.Settle(t.Context(), -1)
		require.ErrorIs(t, err, limiter.ErrInvalidRequest)
	})
}

// TestReserveAsAllowN: ReserveN admits and refuses as AllowN does, and a
// refused reservation holds nothing.
func TestReserveAsAllowN(t *testing.T) {
	everyStore(t, func(t *testing.T, store backend.Store) {
		fake := clock.NewFake(liveStart)
		lim, err := limiter.New(store, reserveConfig(algorithms.SlidingLog), limiter.WithClock(fake))
		require.NoError(t, err)
		reserved(t, lim, "k", 8)
		r, d, err := lim.ReserveN(t.Context(), "k", 3)
		require.NoError(t, err)
		require.Nil(t, r)
		require.False(t, d.Allowed)
		a, err := lim.AllowN(t.Context(), "k", 3)
		require.NoError(t, err)
		require.Equal(t, a, d, "the same denial as AllowN")
		reserved(t, lim, "k", 2)
		_, _, err = lim.ReserveN(t.Context(), "k", 11)
		require.ErrorIs(t, err, limiter.ErrInvalidRequest)
		_, _, err = lim.ReserveN(t.Context(), "", 1)
		require.ErrorIs(t, err, limiter.ErrInvalidRequest)
	})
}

// TestReserveEveryAlgorithm: on every rate algorithm that can reserve, a
// cancelled reservation leaves the key as full as before; those that
// cannot, and concurrency, are refused with an error that says why.
func TestReserveEveryAlgorithm(t *testing.T) {
	everyStore(t, func(t *testing.T, store backend.Store) {
		for _, alg := range algorithms.Names() {
			fake := clock.NewFake(liveStart)
			cfg := reserveConfig(alg)
			cfg.Prefix = "rsv:" + string(alg) + ":"
			lim, err := limiter.New(store, cfg, limiter.WithClock(fake))
			require.NoError(t, err)
			r, _, err := lim.ReserveN(t.Context(), "k", 4)
			if err != nil {
				require.ErrorIs(t, err, limiter.ErrInvalidRequest, "%s", alg)
				t.Logf("%s: %v", alg, err)
				continue
			}
			fake.Advance(time.Millisecond)
			require.NoError(t, r.Cancel(t.Context()), "%s", alg)
			d, err := lim.Peek(t.Context(), "k")
			require.NoError(t, err)
			require.Equal(t, int64(10), d.Remaining, "%s: cancelled, the key is full again", alg)
		}
	})
}

// TestReserveRefused: a guard, Shadow mode, and an exempt key.
func TestReserveRefused(t *testing.T) {
	store := newMemoryStore(t)
	cfg := reserveConfig(algorithms.SlidingLog)
	cfg.Guard = &limiter.Guard{Limit: 100, Window: time.Hour}
	lim, err := limiter.New(store, cfg)
	require.NoError(t, err)
	_, _, err = lim.ReserveN(t.Context(), "k", 1)
	require.ErrorIs(t, err, limiter.ErrInvalidRequest)
	require.Contains(t, err.Error(), "guard")

	cfg = reserveConfig(algorithms.SlidingLog)
	cfg.Exempt = []string{"vip"}
	lim, err = limiter.New(store, cfg)
	require.NoError(t, err)
	r, d, err := lim.ReserveN(t.Context(), "vip", 5)
	require.NoError(t, err)
	require.True(t, d.Exempt)
	d, err = r.Settle(t.Context(), 50)
	require.NoError(t, err)
	require.True(t, d.Exempt, "an exempt key is charged nothing")
}

func newMemoryStore(t *testing.T) backend.Store {
	t.Helper()
	s, err := memorystore.New()
	require.NoError(t, err)
	return s
}

// TestSettleChargesTheExcess: a settle above the estimate charges the
// excess as debt: the key reports 0 left and the next requests are
// refused until the debt leaves the window. The control settles at the
// estimate (no excess charged) and the next request is admitted.
func TestSettleChargesTheExcess(t *testing.T) {
	everyStore(t, func(t *testing.T, store backend.Store) {
		for _, alg := range []algorithms.Name{algorithms.SlidingLog, algorithms.FixedWindow, algorithms.SlidingCounter, algorithms.GCRA} {
			for _, actual := range []int64{14, 4} {
				fake := clock.NewFake(liveStart)
				cfg := reserveConfig(alg)
				cfg.Prefix = "rsvx:" + string(alg) + ":"
				lim, err := limiter.New(store, cfg, limiter.WithClock(fake))
				require.NoError(t, err)
				key := "k" + strconv.FormatInt(actual, 10)
				r := reserved(t, lim, key, 4)
				d, err := r.Settle(t.Context(), actual)
				require.NoError(t, err)
				require.True(t, d.Allowed)
				require.GreaterOrEqual(t, d.Remaining, int64(0))
				a, err := lim.Allow(t.Context(), key)
				require.NoError(t, err)
				if actual > 10 {
					require.Equal(t, int64(0), d.Remaining, "%s: in debt", alg)
					require.False(t, a.Allowed, "%s: the debt refuses the next request", alg)
				} else {
					require.True(t, a.Allowed, "%s: control: settled at the estimate, 6 left", alg)
				}
			}
		}
	})
}
