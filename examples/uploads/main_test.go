package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/internal/dev/exampletest"
)

// TestUploads: the same story in memory and with the leases in a real
// redis-server, through either client: never a third upload of a user in
// flight, each finished upload's slot back at once, and the crashed
// worker's slot back only when its lease times out.
func TestUploads(t *testing.T) {
	exampletest.EveryStore(t, openStore, func(t *testing.T, store backend.Store, _ string) {
		var out strings.Builder
		require.NoError(t, run(&out, store))
		text := out.String()
		refused := `429 refused (RateLimit-Policy: "uploads";q=2;qu="concurrent-requests"; RateLimit: "uploads";r=0; Retry-After: `
		require.Contains(t, text, "09:00:01 ann  c.jpg  "+refused+"29)", text)
		require.Contains(t, text, "09:00:01 bob  d.jpg  admitted, uploading (slots left: 1)", text)
		require.Contains(t, text, "09:00:02 ann  c.jpg  admitted, uploading (slots left: 0)", text, "a's slot came back when it finished")
		// The crashed worker holds one slot: ann gets only one upload at a
		// time until its lease times out at 09:00:34.
		require.Contains(t, text, "09:00:04 ann  f.jpg  "+refused+"30)", text)
		require.Contains(t, text, "09:00:14 ann  g.jpg  "+refused+"20)", text)
		require.Contains(t, text, "09:00:34 ann  g.jpg  admitted, uploading (slots left: 1)", text)
		require.Contains(t, text, "09:00:34 ann  h.jpg  admitted, uploading (slots left: 0)", text)
		require.Equal(t, 8, strings.Count(text, "201 stored"), text)
		require.Equal(t, 3, strings.Count(text, "429 refused"), text)
	})
}
