package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/limiter"
)

// wantDecisions are the lines every run on the shipped file prints.
var wantDecisions = []string{
	"limitkit:login:{demo-user}     7 requests at once: 5 admitted, then denied by its limit (retry in 15m0s)",
	"shop:api:{demo-user}           22 requests at once: 20 admitted, then denied by its limit",
	"limitkit:payment:{demo-user}   5 requests at once: 3 admitted, then denied by its limit (retry in 1m0s)",
	"limitkit:payment:{demo-user}   5 requests one window later: 2 admitted, then denied by its guard (retry in 23h59m0s)",
}

func runText(t *testing.T, o options) string {
	t.Helper()
	var out strings.Builder
	require.NoError(t, run(context.Background(), &out, o))
	t.Log("\n" + out.String())
	return out.String()
}

func TestShippedFile(t *testing.T) {
	text := runText(t, options{})
	require.Contains(t, text, "limits.yaml (shipped): 3 policies")
	require.Contains(t, text, "payment  fixed_window, 3 per 1m0s, guard 5 per 24h0m0s, on failure fail_closed, keys under limitkit:payment:")
	require.Contains(t, text, "store: memory://?max_keys=100000")
	for _, want := range wantDecisions {
		require.Contains(t, text, want)
	}
}

// TestShippedFileOnRedis: -redis replaces the file's backend; run twice to
// show each run starts its demo key afresh.
func TestShippedFileOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	for _, client := range []string{"go-redis", "rueidis"} {
		t.Run(client, func(t *testing.T) {
			for range 2 {
				text := runText(t, options{redisURL: "redis://" + srv.Addr() + "/0", client: client})
				require.Contains(t, text, "store: redis://"+srv.Addr()+"/0 via "+client)
				for _, want := range wantDecisions {
					require.Contains(t, text, want)
				}
			}
			n, err := srv.Do("EXISTS", "limitkit:payment:guard:{demo-user}:sl")
			require.NoError(t, err)
			require.Equal(t, "1", n, "the counts are in Redis")
		})
	}
}

func TestCheck(t *testing.T) {
	text := runText(t, options{check: true})
	require.True(t, strings.HasSuffix(text, "valid\n"))
	require.NotContains(t, text, "Decisions")

	path := filepath.Join(t.TempDir(), "bad.yaml")
	bad := strings.Replace(string(shipped), "window: 15m", "window: 15 minutes", 1)
	require.NoError(t, os.WriteFile(path, []byte(bad), 0o600))
	err := run(context.Background(), &strings.Builder{}, options{configPath: path, check: true})
	require.ErrorIs(t, err, limiter.ErrInvalidConfig)
	require.ErrorContains(t, err, `bad.yaml:23: policies.login.window: "15 minutes" is not a duration`)

	err = run(context.Background(), &strings.Builder{}, options{check: true, redisURL: "http://127.0.0.1:6379"})
	require.ErrorContains(t, err, `backend.url: unknown scheme "http"`)
}
