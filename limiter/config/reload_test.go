package config

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/limiter"
)

// reloadFile is a file with two plans and a shadow guard; %s is the
// backend URL, %s the client, then the free plan's limit and the guard's
// mode.
const reloadFile = `
backend:
  url: %s
  client: %s
policies:
  free:
    limit: %d
    window: 1m
    guard: {limit: 3, window: 1h, mode: %s}
  pro:
    limit: 10
    window: 1m
`

// TestReload: a good file changes every policy at once and keeps counts;
// a broken one changes nothing and says what is wrong; plans from the file
// follow a reload. On memory and a real redis-server through both clients.
func TestReload(t *testing.T) {
	check := func(t *testing.T, url, client string) {
		dir := t.TempDir()
		path := filepath.Join(dir, "limits.yaml")
		write := func(limit int, mode string) {
			require.NoError(t, os.WriteFile(path, fmt.Appendf(nil, reloadFile, url, client, limit, mode), 0o600))
		}
		write(2, "shadow")
		cfg, err := Load(path)
		require.NoError(t, err)
		fake := clock.NewFake(start)
		set, err := cfg.Build(context.Background(), WithLimiterOptions(limiter.WithClock(fake)))
		require.NoError(t, err)
		defer set.Close()
		tier := map[string]string{"bob": "free", "acme": "pro"}
		plans, err := set.Plans(func(_ context.Context, k string) (string, error) { return tier[k], nil }, "free", "pro")
		require.NoError(t, err)
		ctx := context.Background()
		allow := func(key string, n int) (ok, would int) {
			for range n {
				d, _, err := plans.Allow(ctx, key)
				require.NoError(t, err)
				if d.Allowed {
					ok++
				}
				if d.ShadowDenied {
					would++
				}
			}
			return ok, would
		}
		ok, would := allow("bob", 5)
		require.Equal(t, 2, ok, "free: 2 a minute")
		require.Zero(t, would, "the shadow guard (3 an hour) counted only the 2 admitted")
		ok, _ = allow("acme", 3)
		require.Equal(t, 3, ok)

		free := set.Limiter("free")
		gen := free.Generation()
		// Broken files: nothing changes, every problem is reported.
		for name, text := range map[string]string{
			"invalid limit and mode": strings.Replace(fmt.Sprintf(reloadFile, url, client, 0, "dry"), "limit: 10", "limit: ten", 1),
			"syntax":                 "policies: [",
			"new policy":             fmt.Sprintf(reloadFile, url, client, 4, "shadow") + "  gold: {limit: 50, window: 1m}\n",
			"new backend":            fmt.Sprintf(reloadFile, "memory://?max_keys=7", GoRedis, 4, "shadow"),
		} {
			require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
			err := set.ReloadFile(path)
			require.ErrorIs(t, err, limiter.ErrInvalidConfig, name)
			var e *Error
			require.True(t, errors.As(err, &e), name)
			t.Logf("%s: %v", name, err)
			require.Equal(t, gen, free.Generation(), "%s: the old limits stay", name)
		}
		// Every problem of a broken file is reported.
		text := strings.Replace(fmt.Sprintf(reloadFile, url, client, 0, "dry"), "limit: 10", "limit: ten", 1)
		require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
		err = set.ReloadFile(path)
		for _, field := range []string{"policies.free.limit", "policies.free.guard.mode", "policies.pro.limit"} {
			require.ErrorContains(t, err, field)
		}
		require.Equal(t, gen, free.Generation())

		// A good file: free goes to 4 a minute and its guard is enforced.
		write(4, "enforce")
		require.NoError(t, set.ReloadFile(path))
		require.Equal(t, gen+1, free.Generation())
		require.Equal(t, gen+1, set.Limiter("pro").Generation(), "every policy in the same step")
		ok, would = allow("bob", 3)
		require.Equal(t, 1, ok, "the guard, now enforced, had counted 2 of 3")
		require.Zero(t, would)
		d, err := free.Peek(ctx, "bob")
		require.NoError(t, err)
		require.Equal(t, limiter.GuardRule, d.Rule)
	}
	t.Run("memory", func(t *testing.T) { check(t, "memory://", GoRedis) })
	srv := redistest.Start(t)
	for _, client := range []string{GoRedis, Rueidis} {
		t.Run(client, func(t *testing.T) {
			_, err := srv.Do("FLUSHALL")
			require.NoError(t, err)
			check(t, "redis://"+srv.Addr()+"/0", client)
		})
	}
}

// TestShadowModeInFile: mode reads in YAML and JSON, and a bad one names
// its line.
func TestShadowModeInFile(t *testing.T) {
	cfg, err := Parse([]byte(`{"backend": {"url": "memory://"}, "policies": {"api": {"limit": 5, "window": "1m", "mode": "shadow"}}}`), JSON)
	require.NoError(t, err)
	p, _ := cfg.Policy("api")
	require.Equal(t, limiter.Shadow, p.Mode)
	_, err = Parse([]byte("backend: {url: memory://}\npolicies:\n  api:\n    limit: 5\n    window: 1m\n    mode: loud\n"), YAML)
	require.EqualError(t, err, `line 6: policies.api.mode: "loud": write "enforce" (the default) or "shadow"`)
}

// TestPlansFromFile: unknown plan names are clear errors.
func TestPlansFromFile(t *testing.T) {
	set, _ := build(t, "memory://", GoRedis)
	resolve := func(context.Context, string) (string, error) { return "login", nil }
	_, err := set.Plans(resolve, "login", "gold")
	require.ErrorIs(t, err, limiter.ErrUnknownPlan)
	require.ErrorContains(t, err, `plan "gold" is not a policy of the file`)
	_, err = set.Plans(resolve)
	require.ErrorIs(t, err, limiter.ErrInvalidConfig)
	p, err := set.Plans(resolve, "login", "api")
	require.NoError(t, err)
	d, plan, err := p.Allow(context.Background(), "x")
	require.NoError(t, err)
	require.Equal(t, "login", plan)
	require.EqualValues(t, 5, d.Limit)
}
