package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/internal/dev/accuracy"
	"github.com/limitkit/limitkit/internal/dev/redistest"
)

func smallConfig() config {
	return config{
		trace:   accuracy.TraceConfig{Seed: 3, Keys: 200, Limit: 100, Window: time.Minute, Windows: 5},
		memKeys: 500, light: 20, duration: 50 * time.Millisecond,
	}
}

func checkTable(t *testing.T, text string, redis bool) {
	t.Helper()
	for _, name := range algorithms.Names() {
		line := ""
		for _, l := range strings.Split(text, "\n") {
			if strings.HasPrefix(l, "| `"+string(name)+"` |") {
				line = l
			}
		}
		require.NotEmpty(t, line, name)
		if a := algorithms.Lookup(name); a.Accuracy == algorithms.Exact && !a.HoldsLeases() {
			require.Contains(t, line, "| 0.000% | 0.00% | 0.000% | 0.000% | 1.00× |", name)
		}
		require.Equal(t, redis, !strings.Contains(line, "| - |"), name)
	}
}

func TestTableInMemory(t *testing.T) {
	var out strings.Builder
	require.NoError(t, run(&out, smallConfig()))
	checkTable(t, out.String(), false)
}

func TestTableOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	cfg := smallConfig()
	cfg.redis = "redis://" + srv.Addr() + "/0"
	var out strings.Builder
	require.NoError(t, run(&out, cfg))
	checkTable(t, out.String(), true)
}
