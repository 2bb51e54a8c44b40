package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/storeurl"
	"github.com/limitkit/limitkit/internal/dev/exampletest"
)

// TestQuickstart: the same decisions in memory and inside a real
// redis-server by either client. The test links the clients whatever the
// build tags.
func TestQuickstart(t *testing.T) {
	if openRedis == nil {
		// redis.go's opener, which a build without the tag leaves out.
		openRedis = func(url, client string) (backend.Store, func(), error) {
			opened, err := storeurl.Open(t.Context(), url, storeurl.WithClient(client))
			if err != nil {
				return nil, nil, err
			}
			return opened.Store, func() { _ = opened.Close() }, nil
		}
		t.Cleanup(func() { openRedis = nil })
	}
	exampletest.EveryStore(t, openStore, checkOutput)
}

// TestWithoutRedisTag: a default build refuses -redis with the command that
// works, and links no Redis client, YAML parser or circuit breaker, so that
// a first go run compiles little.
func TestWithoutRedisTag(t *testing.T) {
	if openRedis != nil {
		t.Skip("built with the redis tag")
	}
	_, _, _, err := openStore("redis://127.0.0.1:6379/0", "go-redis")
	require.ErrorIs(t, err, errNoRedis)
	require.ErrorContains(t, err, "-tags redis")

	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the dependencies with")
	}
	deps := func(tags string) string {
		out, err := exec.Command(goTool, "list", "-deps", "-tags", tags, ".").CombinedOutput()
		require.NoError(t, err, string(out))
		return string(out)
	}
	heavy := []string{"github.com/redis/go-redis/", "github.com/redis/rueidis", "go.yaml.in/yaml", "github.com/sony/gobreaker"}
	lean := deps("")
	for _, p := range heavy {
		require.NotContains(t, lean, p)
	}
	// Control: with the tag, the same check finds the clients.
	tagged := deps("redis")
	require.Contains(t, tagged, heavy[0])
	require.Contains(t, tagged, heavy[1])
}

func checkOutput(t *testing.T, store backend.Store, where string) {
	t.Helper()
	var out strings.Builder
	require.NoError(t, run(&out, store, where))
	text := out.String()
	for _, want := range []string{
		"t=2.5s  request 6: denied, retry in 7.5s",
		"t=2.5s  request 6: denied, retry in 9.501s",
		"sliding_log      admitted  5 of 10",
		"sliding_counter  admitted  5 of 10",
		"fixed_window     admitted 10 of 10",
	} {
		require.Contains(t, text, want)
	}
	require.Equal(t, len(rateAlgorithms()), strings.Count(text, "after the RetryAfter of request 7: allowed"))
}
