package otelobserve_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/observe"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
)

// TestShadowDenials: a limit in shadow mode's would-be denials are counted
// as outcome shadow_denied, apart from enforced denials.
func TestShadowDenials(t *testing.T) {
	metrics, reader := newMetrics(t)
	mem, err := memorystore.New()
	require.NoError(t, err)
	lim, err := limiter.New(observe.Wrap(mem, metrics.Observer()),
		limiter.Config{Limit: 1, Window: time.Minute, Prefix: "try:", Mode: limiter.Shadow}, limiter.WithClock(clock.NewFake(start)))
	require.NoError(t, err)
	for range 3 {
		d, err := lim.Allow(context.Background(), "k")
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	got := collect(t, reader)
	require.Equal(t, 1.0, got["limitkit.decisions{degraded=false,outcome=allowed,policy=try:}"].value)
	require.Equal(t, 2.0, got["limitkit.decisions{degraded=false,outcome=shadow_denied,policy=try:}"].value)
	require.Zero(t, got["limitkit.decisions{degraded=false,outcome=denied,policy=try:}"].value)
}
