package limiter_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/storetest"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
)

var start = time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)

func newLimiter(t *testing.T, cfg limiter.Config) (*limiter.Limiter, *clock.Fake) {
	t.Helper()
	store, err := memorystore.New()
	require.NoError(t, err)
	fake := clock.NewFake(start)
	lim, err := limiter.New(store, cfg, limiter.WithClock(fake))
	require.NoError(t, err)
	return lim, fake
}

// takeN takes n units of key: AllowN, or on a concurrency limit AcquireN
// with the lease never released (held until it times out, as a log's
// entry slides out), so that tests over every algorithm cover it too.
func takeN(ctx context.Context, lim *limiter.Limiter, key string, n int64) (limiter.Decision, error) {
	if algorithms.Lookup(lim.Config().Algorithm).HoldsLeases() {
		_, d, err := lim.AcquireN(ctx, key, n)
		return d, err
	}
	return lim.AllowN(ctx, key, n)
}

func TestNewRejectsBadConfig(t *testing.T) {
	store, err := memorystore.New()
	require.NoError(t, err)
	bad := map[string]limiter.Config{
		"limit is 0":                {Limit: 0, Window: time.Second},
		"limit is -1":               {Limit: -1, Window: time.Second},
		"window is 0s":              {Limit: 1},
		"window is -1s":             {Limit: 1, Window: -time.Second},
		`unknown algorithm "token"`: {Algorithm: "token", Limit: 1, Window: time.Second},
		"sliding_log maximum":       {Limit: algorithms.MaxSlidingLogLimit + 1, Window: time.Second},
		"above the maximum":         {Algorithm: algorithms.FixedWindow, Limit: algorithms.MaxLimit + 1, Window: time.Second},
		"longer than the maximum":   {Limit: 1, Window: 400 * 24 * time.Hour},
		"whole number of milli":     {Limit: 1, Window: 1500 * time.Microsecond},
		"contains '{' or '}'":       {Limit: 1, Window: time.Second, Prefix: "api{v1}:"},
	}
	for want, cfg := range bad {
		_, err := limiter.New(store, cfg)
		require.ErrorIs(t, err, limiter.ErrInvalidConfig, want)
		require.ErrorContains(t, err, want)
		require.True(t, strings.HasPrefix(err.Error(), "limiter: "), "one prefix per package: %v", err)
		require.ErrorIs(t, cfg.Validate(), limiter.ErrInvalidConfig, want)
		if cfg.Prefix == "" {
			cfg.Prefix = "g:"
		}
		_, err = limiter.NewGroup(store, []limiter.Config{{Limit: 1, Window: time.Second}, cfg})
		require.ErrorIs(t, err, limiter.ErrInvalidConfig, want)
		require.True(t, strings.HasPrefix(err.Error(), "limiter: limit 1: "), "the index goes after the prefix: %v", err)
	}
	_, err = limiter.New(nil, limiter.Config{Limit: 1, Window: time.Second})
	require.ErrorIs(t, err, limiter.ErrInvalidConfig)
	require.ErrorContains(t, err, "store is nil")
}

// TestOptions: every constructor refuses a nil clock, naming the option,
// and skips a nil option; the clock given reaches each (a fake clock's
// time is in the decisions).
func TestOptions(t *testing.T) {
	store, err := memorystore.New()
	require.NoError(t, err)
	cfg := limiter.Config{Limit: 1, Window: time.Minute}
	_, err = limiter.New(store, cfg, limiter.WithClock(nil))
	require.ErrorContains(t, err, "limiter: WithClock: the clock is nil")
	_, err = limiter.NewComposite(store, []limiter.Config{cfg}, limiter.WithClock(nil))
	require.ErrorContains(t, err, "limiter: WithClock: ")
	_, err = limiter.NewGroup(store, []limiter.Config{cfg}, limiter.WithClock(nil))
	require.ErrorContains(t, err, "limiter: WithClock: ")

	fake := clock.NewFake(start)
	lim, err := limiter.New(store, limiter.Config{Limit: 1, Window: time.Minute, Prefix: "opt:"}, nil, limiter.WithClock(fake))
	require.NoError(t, err, "a nil option is skipped")
	_, err = lim.Allow(t.Context(), "k")
	require.NoError(t, err)
	d, err := lim.Allow(t.Context(), "k")
	require.NoError(t, err)
	require.False(t, d.Allowed)
	fake.Advance(time.Minute)
	d, err = lim.Allow(t.Context(), "k")
	require.NoError(t, err)
	require.True(t, d.Allowed, "the fake clock decides: a minute later the key is free")
}

func TestDefaults(t *testing.T) {
	lim, _ := newLimiter(t, limiter.Config{Limit: 3, Window: time.Second})
	require.Equal(t, limiter.Config{Algorithm: algorithms.SlidingLog, Limit: 3, Window: time.Second, Prefix: limiter.DefaultPrefix,
		ReservationTimeout: limiter.DefaultReservationTimeout}, lim.Config())
}

func TestConfigJSON(t *testing.T) {
	var c limiter.Config
	require.NoError(t, json.Unmarshal([]byte(`{"algorithm":"sliding_counter","limit":100,"window":"1m","prefix":"api:"}`), &c))
	require.Equal(t, limiter.Config{Algorithm: algorithms.SlidingCounter, Limit: 100, Window: time.Minute, Prefix: "api:"}, c)

	require.NoError(t, json.Unmarshal([]byte(`{"limit":5,"window":"500ms"}`), &c))
	require.Equal(t, limiter.Config{Limit: 5, Window: 500 * time.Millisecond}, c)

	out, err := json.Marshal(limiter.Config{Algorithm: algorithms.FixedWindow, Limit: 7, Window: 90 * time.Second, Prefix: "p:"})
	require.NoError(t, err)
	require.JSONEq(t, `{"algorithm":"fixed_window","limit":7,"window":"1m30s","prefix":"p:"}`, string(out))
	var back limiter.Config
	require.NoError(t, json.Unmarshal(out, &back))
	require.Equal(t, 90*time.Second, back.Window)

	bad := map[string]string{
		`{"limit":5,"window":60}`:           `"60" is not a duration; write it like "1m"`,
		`{"limit":5,"window":"1 minute"}`:   "duration",
		`{"limit":5,"window":"1m","lmt":1}`: "unknown field",
		`{"limit":"5","window":"1m"}`:       "limit",
	}
	for in, want := range bad {
		err := json.Unmarshal([]byte(in), &c)
		require.ErrorIs(t, err, limiter.ErrInvalidConfig, in)
		require.ErrorContains(t, err, want, in)
	}
}

func TestAllowPeekReset(t *testing.T) {
	for _, alg := range algorithms.Names() {
		t.Run(string(alg), func(t *testing.T) {
			lim, fake := newLimiter(t, limiter.Config{Algorithm: alg, Limit: 3, Window: 10 * time.Second})
			ctx := t.Context()
			for i := range 3 {
				d, err := takeN(ctx, lim, "alice", 1)
				require.NoError(t, err)
				require.True(t, d.Allowed)
				require.Equal(t, int64(2-i), d.Remaining)
				require.Equal(t, int64(3), d.Limit)
			}
			d, err := takeN(ctx, lim, "alice", 1)
			require.NoError(t, err)
			require.False(t, d.Allowed)
			require.Positive(t, d.RetryAfter)

			p, err := lim.Peek(ctx, "alice")
			require.NoError(t, err)
			require.Equal(t, d, p)

			other, err := takeN(ctx, lim, "bob", 3)
			require.NoError(t, err)
			require.True(t, other.Allowed)

			fake.Advance(d.RetryAfter)
			d, err = takeN(ctx, lim, "alice", 1)
			require.NoError(t, err)
			require.True(t, d.Allowed, "admitted exactly RetryAfter later")

			require.NoError(t, lim.Reset(ctx, "bob"))
			d, err = takeN(ctx, lim, "bob", 3)
			require.NoError(t, err)
			require.True(t, d.Allowed)
		})
	}
}

func TestBadCalls(t *testing.T) {
	lim, _ := newLimiter(t, limiter.Config{Limit: 5, Window: time.Second})
	ctx := t.Context()
	for _, n := range []int64{0, -1, 6} {
		_, err := lim.AllowN(ctx, "k", n)
		require.ErrorIs(t, err, limiter.ErrInvalidRequest, "n=%d", n)
		_, err = lim.WaitN(ctx, "k", n)
		require.ErrorIs(t, err, limiter.ErrInvalidRequest, "n=%d", n)
	}
	_, err := lim.Allow(ctx, "")
	require.ErrorIs(t, err, limiter.ErrInvalidRequest)
	_, err = lim.Peek(ctx, "")
	require.ErrorIs(t, err, limiter.ErrInvalidRequest)
	require.ErrorIs(t, lim.Reset(ctx, ""), limiter.ErrInvalidRequest)
	_, err = lim.Wait(ctx, "")
	require.ErrorIs(t, err, limiter.ErrInvalidRequest)
}

func TestHugeLimitAndYearWindow(t *testing.T) {
	// The largest limits each takes: 2^53, and a fixed window's 2^43
	// (its Redis count keeps an epoch above it).
	for alg, huge := range map[algorithms.Name]int64{algorithms.SlidingCounter: 1 << 53, algorithms.FixedWindow: algorithms.MaxFixedWindowLimit} {
		lim, fake := newLimiter(t, limiter.Config{Algorithm: alg, Limit: huge, Window: 365 * 24 * time.Hour})
		ctx := t.Context()
		d, err := lim.AllowN(ctx, "k", huge)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		require.Zero(t, d.Remaining)
		d, err = lim.Allow(ctx, "k")
		require.NoError(t, err)
		require.False(t, d.Allowed)
		require.LessOrEqual(t, d.RetryAfter, 2*365*24*time.Hour)
		fake.Advance(d.RetryAfter)
		d, err = lim.Allow(ctx, "k")
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
}

func TestWaitFollowsTheClock(t *testing.T) {
	lim, fake := newLimiter(t, limiter.Config{Limit: 2, Window: time.Minute})
	ctx := t.Context()
	_, err := lim.AllowN(ctx, "k", 2)
	require.NoError(t, err)

	type result struct {
		d   limiter.Decision
		err error
	}
	done := make(chan result, 1)
	go func() {
		d, err := lim.Wait(ctx, "k")
		done <- result{d, err}
	}()
	waitFor(t, func() bool { return fake.Waiters() == 1 })
	select {
	case <-done:
		t.Fatal("Wait returned before the window passed")
	default:
	}
	fake.Advance(time.Minute)
	r := <-done
	require.NoError(t, r.err)
	require.True(t, r.d.Allowed)
	require.Equal(t, int64(1), r.d.Remaining)
}

func TestWaitStopsWithTheContext(t *testing.T) {
	lim, fake := newLimiter(t, limiter.Config{Limit: 1, Window: time.Minute})
	_, err := lim.Allow(t.Context(), "k")
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := lim.Wait(ctx, "k")
		done <- err
	}()
	waitFor(t, func() bool { return fake.Waiters() == 1 })
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)

	// A deadline sooner than the retry fails at once.
	short, cancel2 := context.WithTimeout(t.Context(), time.Second)
	defer cancel2()
	d, err := lim.Wait(short, "k")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.False(t, d.Allowed)
}

// waitFor polls cond for up to ten seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not met within 10s")
}

func TestStoreErrorsPassThrough(t *testing.T) {
	down := errors.New("connection refused")
	lim, err := limiter.New(storetest.Down{Err: down}, limiter.Config{Limit: 1, Window: time.Second})
	require.NoError(t, err)
	ctx := t.Context()
	_, err = lim.Allow(ctx, "k")
	require.ErrorIs(t, err, down)
	_, err = lim.Peek(ctx, "k")
	require.ErrorIs(t, err, down)
	require.ErrorIs(t, lim.Reset(ctx, "k"), down)
	_, err = lim.Wait(ctx, "k")
	require.ErrorIs(t, err, down)
}

// recording remembers the requests it receives.
type recording struct {
	backend.Store
	got []backend.Request
}

func (r *recording) Take(ctx context.Context, req backend.Request) (backend.Result, error) {
	r.got = append(r.got, req)
	return r.Store.Take(ctx, req)
}

func TestClockReadOncePerCallAndPassedDown(t *testing.T) {
	store, err := memorystore.New()
	require.NoError(t, err)
	rec := &recording{Store: store}
	fake := clock.NewFake(start)
	lim, err := limiter.New(rec, limiter.Config{Limit: 5, Window: time.Second, Prefix: "login:"}, limiter.WithClock(fake))
	require.NoError(t, err)
	_, err = lim.AllowN(t.Context(), "carol", 2)
	require.NoError(t, err)
	fake.Advance(time.Second)
	_, err = lim.Allow(t.Context(), "carol")
	require.NoError(t, err)
	require.Len(t, rec.got, 2)
	require.Equal(t, backend.Key{Prefix: "login:", ID: "carol"}, rec.got[0].Key)
	require.Equal(t, start, rec.got[0].Now)
	require.Equal(t, int64(2), rec.got[0].Cost)
	require.Equal(t, start.Add(time.Second), rec.got[1].Now)
}
