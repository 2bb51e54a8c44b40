package config_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/limiter/adaptive"
	"github.com/limitkit/limitkit/limiter/config"
)

const adaptiveFile = `
backend: {url: "memory://"}
policies:
  api: {limit: 10, window: 1m}
adaptive:
  service:
    law: aimd
    min: 2
    max: 50
    initial: 8
    queue_size: 4
    max_wait: 20ms
    sheddable_share: 0.5
    backoff: 0.8
`

func TestAdaptiveBlock(t *testing.T) {
	cfg, err := config.Parse([]byte(adaptiveFile), config.YAML)
	require.NoError(t, err)
	require.Len(t, cfg.Adaptive, 1)
	a := cfg.Adaptive[0]
	require.Equal(t, "aimd", a.Law)
	require.Equal(t, 0.8, a.Backoff)
	require.Equal(t, 0.5, a.Config.SheddableShare)
	lim, err := cfg.AdaptiveLimiter("service", adaptive.Observer{})
	require.NoError(t, err)
	require.Equal(t, 8, lim.Limit())
	_, err = cfg.AdaptiveLimiter("nope", adaptive.Observer{})
	require.Error(t, err)
	// Each law's name builds that law.
	for _, law := range []string{"gradient2", "vegas", "aimd", "fixed"} {
		file := "backend: {url: \"memory://\"}\npolicies:\n  api: {limit: 10, window: 1m}\nadaptive:\n  s:\n    law: " + law + "\n"
		cfg, err := config.Parse([]byte(file), config.YAML)
		require.NoError(t, err, law)
		lim, err := cfg.AdaptiveLimiter("s", adaptive.Observer{})
		require.NoError(t, err, law)
		require.Equal(t, law, lim.Law(), law)
	}
	// Gradient2's options reach the block.
	file := "backend: {url: \"memory://\"}\npolicies:\n  api: {limit: 10, window: 1m}\nadaptive:\n  s:\n    probe_windows: 30\n    p90: true\n    fall_at_once: true\n"
	cfg, err = config.Parse([]byte(file), config.YAML)
	require.NoError(t, err)
	g := cfg.Adaptive[0]
	require.Equal(t, [3]any{30, true, true}, [3]any{g.ProbeWindows, g.P90, g.FallAtOnce})
}

func TestAdaptiveBlockErrors(t *testing.T) {
	for field, bad := range map[string]string{
		"law: cubic":         "unknown",
		"min: 9\n    max: 3": "Min",
		"sheddable_share: x": "not a number",
		"tolerance: 0.5":     "Tolerance",
		"probe_windows: 1":   "ProbeWindows",
		"queu_size: 3":       "did you mean",
	} {
		file := "backend: {url: \"memory://\"}\npolicies:\n  api: {limit: 10, window: 1m}\nadaptive:\n  s:\n    " + field + "\n"
		_, err := config.Parse([]byte(file), config.YAML)
		require.ErrorContains(t, err, bad, field)
	}
}
