package limiter_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
)

func TestGuard(t *testing.T) {
	lim, fake := newLimiter(t, limiter.Config{Limit: 3, Window: time.Minute, Prefix: "pay:",
		Guard: &limiter.Guard{Limit: 5, Window: 24 * time.Hour}})
	require.Equal(t, algorithms.FixedWindow, lim.Config().Guard.Algorithm, "the guard's default algorithm")
	ctx := t.Context()
	allowed := 0
	var last limiter.Decision
	for range 4 {
		for range 4 {
			d, err := lim.Allow(ctx, "acct")
			require.NoError(t, err)
			if d.Allowed {
				allowed++
			}
			last = d
		}
		fake.Advance(time.Minute)
	}
	require.Equal(t, 5, allowed, "the guard caps the day")
	require.Equal(t, limiter.GuardRule, last.Rule)
	require.False(t, last.Allowed)

	// Peek and Reset cover both rules.
	p, err := lim.Peek(ctx, "acct")
	require.NoError(t, err)
	require.False(t, p.Allowed)
	require.Equal(t, limiter.GuardRule, p.Rule)
	require.NoError(t, lim.Reset(ctx, "acct"))
	p, err = lim.Peek(ctx, "acct")
	require.NoError(t, err)
	require.True(t, p.Allowed)
	require.EqualValues(t, 3, p.Remaining)

	// The guard's limit bounds the cost too.
	small, _ := newLimiter(t, limiter.Config{Limit: 10, Window: time.Minute, Guard: &limiter.Guard{Limit: 2, Window: time.Hour}})
	_, err = small.AllowN(ctx, "k", 3)
	require.ErrorIs(t, err, limiter.ErrInvalidRequest)
}

func TestGuardConfig(t *testing.T) {
	store, err := memorystore.New()
	require.NoError(t, err)
	_, err = limiter.New(store, limiter.Config{Limit: 3, Window: time.Minute, Guard: &limiter.Guard{Window: time.Hour}})
	require.ErrorIs(t, err, limiter.ErrInvalidConfig)
	require.ErrorContains(t, err, "guard: ")

	var c limiter.Config
	in := `{"limit":100,"window":"1m","prefix":"pay:","on_failure":"local:3",
		"guard":{"algorithm":"sliding_counter","limit":1000,"window":"24h","on_failure":"fail_closed"}}`
	require.NoError(t, json.Unmarshal([]byte(in), &c))
	require.Equal(t, limiter.Config{Limit: 100, Window: time.Minute, Prefix: "pay:", OnFailure: backend.LocalPolicy(3),
		Guard: &limiter.Guard{Algorithm: algorithms.SlidingCounter, Limit: 1000, Window: 24 * time.Hour, OnFailure: backend.FailClosed}}, c)
	out, err := json.Marshal(c)
	require.NoError(t, err)
	var back limiter.Config
	require.NoError(t, json.Unmarshal(out, &back))
	require.Equal(t, c, back)

	bad := map[string]string{
		`{"limit":5,"window":"1m","on_failure":"sometimes"}`:             "failure policy",
		`{"limit":5,"window":"1m","guard":{"limit":5,"window":"1 day"}}`: "guard.window",
		`{"limit":5,"window":"1m","guard":{"limit":5,"windw":"1h"}}`:     "unknown field",
		`{"limit":5,"window":"1m","guard":{"limit":5,"window":60}}`:      "window",
	}
	for in, want := range bad {
		err := json.Unmarshal([]byte(in), &c)
		require.ErrorIs(t, err, limiter.ErrInvalidConfig, in)
		require.ErrorContains(t, err, want, in)
	}
}

func TestComposite(t *testing.T) {
	store, err := memorystore.New()
	require.NoError(t, err)
	fake := clock.NewFake(start)
	c, err := limiter.NewComposite(store, []limiter.Config{
		{Limit: 2, Window: time.Minute, Prefix: "user:"},
		{Algorithm: algorithms.FixedWindow, Limit: 3, Window: time.Minute, Prefix: "tenant:"},
	}, limiter.WithClock(fake))
	require.NoError(t, err)
	ctx := t.Context()
	// Two users of one tenant: the user limit, then the tenant's.
	for i, want := range []struct {
		user    string
		allowed bool
		rule    int
	}{{"a", true, 0}, {"a", true, 0}, {"a", false, 0}, {"b", true, 1}, {"b", false, 1}} {
		d, err := c.Allow(ctx, want.user, "t1")
		require.NoError(t, err)
		require.Equal(t, want.allowed, d.Allowed, "call %d", i)
		require.Equal(t, want.rule, d.Rule, "call %d", i)
	}
	// The tenant's denial took nothing from user b.
	d, err := c.Peek(ctx, "b", "t2")
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.EqualValues(t, 1, d.Remaining)
	require.NoError(t, c.Reset(ctx, "b", "t1"))
	d, err = c.Allow(ctx, "b", "t1")
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Len(t, c.Configs(), 2)

	_, err = c.Allow(ctx, "only-one-key")
	require.ErrorIs(t, err, limiter.ErrInvalidRequest)
	_, err = c.Allow(ctx, "a", "")
	require.ErrorIs(t, err, limiter.ErrInvalidRequest)

	for want, cfgs := range map[string][]limiter.Config{
		"0 limits":         nil,
		"share the prefix": {{Limit: 1, Window: time.Second, Prefix: "x:"}, {Limit: 2, Window: time.Second, Prefix: "x:"}},
		"has a guard":      {{Limit: 1, Window: time.Second, Guard: &limiter.Guard{Limit: 1, Window: time.Hour}}},
		"limit 1: ":        {{Limit: 1, Window: time.Second, Prefix: "a:"}, {Window: time.Second, Prefix: "b:"}},
	} {
		_, err := limiter.NewComposite(store, cfgs)
		require.ErrorIs(t, err, limiter.ErrInvalidConfig, want)
		require.ErrorContains(t, err, want)
	}
	_, err = limiter.NewComposite(nil, []limiter.Config{{Limit: 1, Window: time.Second}})
	require.ErrorIs(t, err, limiter.ErrInvalidConfig)
}
