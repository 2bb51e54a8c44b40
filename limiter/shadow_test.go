package limiter_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/observe"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
)

// outcomes counts what an observer saw, by policy and outcome.
type outcomes struct {
	mu sync.Mutex
	n  map[string]int
}

func (o *outcomes) observer() observe.Observer {
	o.n = map[string]int{}
	return observe.Observer{OnDecision: func(_ context.Context, d observe.Decision) {
		o.mu.Lock()
		o.n[d.Policy+" "+d.Outcome()]++
		o.mu.Unlock()
	}}
}

func (o *outcomes) get(k string) int { o.mu.Lock(); defer o.mu.Unlock(); return o.n[k] }

// TestShadowLimit: a limit in shadow mode admits everything, says which
// requests it would have denied, counts exactly as enforcing would (so
// switching to enforce keeps the counts), and the observer reports its
// denials apart.
func TestShadowLimit(t *testing.T) {
	everyStore(t, func(t *testing.T, store backend.Store) {
		ctx := t.Context()
		var seen outcomes
		fake := clock.NewFake(liveStart)
		cfg := limiter.Config{Limit: 2, Window: time.Minute, Prefix: "shadow:", Mode: limiter.Shadow}
		lim, err := limiter.New(observe.Wrap(store, seen.observer()), cfg, limiter.WithClock(fake))
		require.NoError(t, err)
		var would []bool
		for range 5 {
			d, err := lim.Allow(ctx, "k")
			require.NoError(t, err)
			require.True(t, d.Allowed, "a shadow limit never denies")
			require.Zero(t, d.RetryAfter)
			would = append(would, d.ShadowDenied)
		}
		require.Equal(t, []bool{false, false, true, true, true}, would)
		require.Equal(t, 2, seen.get("shadow: allowed"))
		require.Equal(t, 3, seen.get("shadow: shadow_denied"))
		require.Zero(t, seen.get("shadow: denied"))

		p, err := lim.Peek(ctx, "k")
		require.NoError(t, err)
		require.True(t, p.Allowed)
		require.True(t, p.ShadowDenied)

		// The counts are the enforced limit's: 2, not 5. Enforced now, the
		// key is denied until the first entry slides out.
		cfg.Mode = limiter.Enforce
		require.NoError(t, lim.SetConfig(cfg))
		d, err := lim.Allow(ctx, "k")
		require.NoError(t, err)
		require.False(t, d.Allowed)
		require.False(t, d.ShadowDenied)
		require.Equal(t, time.Minute, d.RetryAfter)
		require.Equal(t, 1, seen.get("shadow: denied"))

		// A cost above a shadow limit is a shadow denial, not an error.
		cfg.Mode = limiter.Shadow
		require.NoError(t, lim.SetConfig(cfg))
		d, err = lim.AllowN(ctx, "k", 3)
		require.NoError(t, err)
		require.True(t, d.Allowed && d.ShadowDenied)
	})
}

// TestShadowGuard: a guard in shadow mode beside an enforced limit, and
// the other way round. Only the enforced rule denies; the shadow rule
// counts the requests the enforced one admitted.
func TestShadowGuard(t *testing.T) {
	everyStore(t, func(t *testing.T, store backend.Store) {
		ctx := t.Context()
		fake := clock.NewFake(liveStart)
		lim, err := limiter.New(store, limiter.Config{Limit: 4, Window: time.Minute, Prefix: "sg:",
			Guard: &limiter.Guard{Limit: 2, Window: time.Hour, Mode: limiter.Shadow}}, limiter.WithClock(fake))
		require.NoError(t, err)
		type got struct {
			allowed, would bool
			rule           int
		}
		var gs []got
		for range 5 {
			d, err := lim.Allow(ctx, "k")
			require.NoError(t, err)
			gs = append(gs, got{d.Allowed, d.ShadowDenied, d.Rule})
		}
		require.Equal(t, []got{{true, false, 0}, {true, false, 0}, {true, true, 0}, {true, true, 0}, {false, false, 0}}, gs,
			"the main limit (4) decides; the shadow guard (2) would have denied the 3rd and 4th")

		// Main limit shadowed, guard enforced: denials come from the guard.
		lim2, err := limiter.New(store, limiter.Config{Limit: 1, Window: time.Minute, Prefix: "sm:", Mode: limiter.Shadow,
			Guard: &limiter.Guard{Limit: 3, Window: time.Hour}}, limiter.WithClock(fake))
		require.NoError(t, err)
		gs = nil
		for range 4 {
			d, err := lim2.Allow(ctx, "k")
			require.NoError(t, err)
			gs = append(gs, got{d.Allowed, d.ShadowDenied, d.Rule})
		}
		require.Equal(t, []got{{true, false, limiter.GuardRule}, {true, true, limiter.GuardRule}, {true, true, limiter.GuardRule},
			{false, false, limiter.GuardRule}}, gs)
	})
}

// TestShadowComposite: one rule of a composite in shadow mode.
func TestShadowComposite(t *testing.T) {
	everyStore(t, func(t *testing.T, store backend.Store) {
		ctx := t.Context()
		var seen outcomes
		c, err := limiter.NewComposite(observe.Wrap(store, seen.observer()), []limiter.Config{
			{Limit: 3, Window: time.Minute, Prefix: "user:"},
			{Limit: 1, Window: time.Minute, Prefix: "tenant:", Mode: limiter.Shadow},
		}, limiter.WithClock(clock.NewFake(liveStart)))
		require.NoError(t, err)
		var allowed, would int
		for range 5 {
			d, err := c.Allow(ctx, "alice", "acme")
			require.NoError(t, err)
			if d.Allowed {
				allowed++
			}
			if d.ShadowDenied {
				would++
			}
		}
		require.Equal(t, 3, allowed, "the enforced user limit")
		require.Equal(t, 2, would, "the shadow tenant limit counted 1 of the 3 admitted")
		require.Equal(t, 2, seen.get("tenant: shadow_denied"))
		require.Equal(t, 2, seen.get("user: denied"))
	})
}

// TestShadowStoreErrors: a failing store fails a shadow-only limiter as it
// would an enforced one, but never a request the enforced rules decided.
func TestShadowStoreErrors(t *testing.T) {
	down := errors.New("down")
	flaky := &failShadow{err: down}
	lim, err := limiter.New(flaky, limiter.Config{Limit: 3, Window: time.Minute, Mode: limiter.Shadow})
	require.NoError(t, err)
	_, err = lim.Allow(context.Background(), "k")
	require.ErrorIs(t, err, down)

	lim, err = limiter.New(flaky, limiter.Config{Limit: 3, Window: time.Minute,
		Guard: &limiter.Guard{Limit: 1, Window: time.Hour, Mode: limiter.Shadow}})
	require.NoError(t, err)
	d, err := lim.Allow(context.Background(), "k")
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.False(t, d.ShadowDenied, "an undecided shadow rule reports nothing")
}

// failShadow admits enforced requests and fails shadow ones.
type failShadow struct {
	backend.Store
	err error
}

func (f *failShadow) Take(_ context.Context, req backend.Request) (backend.Result, error) {
	if req.Shadow {
		return backend.Result{}, f.err
	}
	return backend.Result{Allowed: true, Limit: req.Rule.Limit}, nil
}

// TestModeJSON: mode reads and writes in JSON, for the limit and its guard.
func TestModeJSON(t *testing.T) {
	var c limiter.Config
	require.NoError(t, json.Unmarshal([]byte(`{"limit": 5, "window": "1m", "mode": "shadow",
		"guard": {"limit": 9, "window": "1h", "mode": "enforce"}}`), &c))
	require.Equal(t, limiter.Shadow, c.Mode)
	require.Equal(t, limiter.Enforce, c.Guard.Mode)
	out, err := json.Marshal(c)
	require.NoError(t, err)
	require.Contains(t, string(out), `"mode":"shadow"`)
	var back limiter.Config
	require.NoError(t, json.Unmarshal(out, &back))
	require.Equal(t, c, back)
	require.NoError(t, json.Unmarshal([]byte(`{"limit": 5, "window": "1m", "mode": "dry"}`), &c))
	require.ErrorIs(t, c.Validate(), limiter.ErrInvalidConfig)
	require.ErrorContains(t, c.Validate(), `mode "dry": write "enforce" or "shadow"`)
}

// TestShadowGuardOwnStore: a shadow guard on a store of its own counts
// there and never denies; the main limit decides.
func TestShadowGuardOwnStore(t *testing.T) {
	everyStore(t, func(t *testing.T, store backend.Store) {
		own, err := memorystore.New()
		require.NoError(t, err)
		lim, err := limiter.New(store, limiter.Config{Limit: 3, Window: time.Minute, Prefix: "own:",
			Guard: &limiter.Guard{Limit: 1, Window: time.Hour, Mode: limiter.Shadow, Store: own}},
			limiter.WithClock(clock.NewFake(liveStart)))
		require.NoError(t, err)
		var allowed, would int
		for range 4 {
			d, err := lim.Allow(t.Context(), "k")
			require.NoError(t, err)
			if d.Allowed {
				allowed++
			}
			if d.ShadowDenied {
				would++
			}
		}
		require.Equal(t, 3, allowed)
		require.Equal(t, 2, would)
		p, err := own.Peek(t.Context(), backend.Request{Key: backend.Key{Prefix: "own:guard:", ID: "k"},
			Rule: algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Hour}, Now: liveStart, Cost: 1})
		require.NoError(t, err)
		require.False(t, p.Allowed, "the guard's count is in its own store")
	})
}
