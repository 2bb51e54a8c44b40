package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/internal/dev/exampletest"
)

// TestPlans: the demo's two tiers give the same answers in memory and
// with the counts in a real redis-server, through either client.
func TestPlans(t *testing.T) {
	exampletest.EveryStore(t, openStore, func(t *testing.T, store backend.Store, where string) {
		var out strings.Builder
		require.NoError(t, run(&out, store, where))
		text := out.String()
		t.Log("\n" + text)
		lines := strings.Split(strings.TrimSpace(text), "\n")
		require.Len(t, lines, 13)
		require.Contains(t, lines[0], where)
		for i, want := range []string{
			`key-free-alice  200  "free";q=3;w=60        "free";r=2`,
			`key-free-alice  200  "free";q=3;w=60        "free";r=1`,
			`key-free-alice  200  "free";q=3;w=60        "free";r=0`,
			`key-free-alice  429  "free";q=3;w=60        "free";r=0;t=60`,
			`key-free-bob    200  "free";q=3;w=60        "free";r=2`,
			`key-pro-acme    200  "pro";q=10;w=60        "pro";r=9`,
			`key-pro-acme    200  "pro";q=10;w=60        "pro";r=8`,
			`key-pro-acme    200  "pro";q=10;w=60        "pro";r=7`,
			`key-pro-acme    200  "pro";q=10;w=60        "pro";r=6`,
			`key-stolen      401`,
			`a minute later:`,
			`key-free-alice  200  "free";q=3;w=60        "free";r=2`,
		} {
			require.Equal(t, want, strings.TrimRight(lines[i+1], " "), "line %d", i+1)
		}
	})
}
