package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/examples/internal/exampletest"
)

// TestQuickstart: the same decisions in memory and inside a real
// redis-server by either client.
func TestQuickstart(t *testing.T) {
	exampletest.EveryStore(t, openStore, checkOutput)
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
