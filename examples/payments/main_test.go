package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/internal/dev/exampletest"
)

// TestPayments: the same decisions in memory and with the state in a real
// redis-server, through either client.
func TestPayments(t *testing.T) {
	exampletest.EveryStore(t, openStore, func(t *testing.T, store backend.Store, _ string) { checkOutput(t, store) })
}

func checkOutput(t *testing.T, primary backend.Store) {
	t.Helper()
	var out strings.Builder
	require.NoError(t, run(&out, primary))
	text := out.String()
	require.Equal(t, 12, strings.Count(text, "ann   201"), text) // the guard's 12 a day
	require.Contains(t, text, "09:00:25 ann   429 too many orders this minute (Retry-After: 35)")
	require.Contains(t, text, "09:04:30 ann   429 daily order limit reached (Retry-After: 53730)")
	require.Equal(t, 3, strings.Count(text, "daily order limit reached"), text)
	require.Equal(t, 2, strings.Count(text, "bob   503 orders paused"), text)
	require.Contains(t, text, "09:05:30 bob   201 order accepted (4 left this minute)")
}
