package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSimulatedOutage runs the example without Redis: decisions go local
// during the outage and back to the primary after it.
func TestSimulatedOutage(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 7*time.Second)
	defer cancel()
	var out strings.Builder
	require.NoError(t, run(ctx, &out, "", ""))
	text := out.String()
	opened := strings.Index(text, "from=closed to=open")
	local := strings.Index(text, "decided by local (degraded)")
	closed := strings.Index(text, "from=half-open to=closed")
	back := strings.LastIndex(text, "decided by primary")
	require.True(t, opened > 0 && local > opened && closed > local && back > closed, "unexpected sequence:\n%s", text)
}
