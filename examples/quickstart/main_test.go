package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/internal/redistest"
)

func TestQuickstartInMemory(t *testing.T) {
	store, where, closeStore, err := openStore("", "")
	require.NoError(t, err)
	defer closeStore()
	checkOutput(t, store, where)
}

// TestQuickstartOnRedis: the same decisions, made inside a real
// redis-server by either client.
func TestQuickstartOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	for _, client := range []string{"go-redis", "rueidis"} {
		t.Run(client, func(t *testing.T) {
			store, where, closeStore, err := openStore("redis://"+srv.Addr()+"/0", client)
			require.NoError(t, err)
			defer closeStore()
			checkOutput(t, store, where)
		})
	}
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
	require.Equal(t, len(algorithms.Names()), strings.Count(text, "after the RetryAfter of request 7: allowed"))
}
