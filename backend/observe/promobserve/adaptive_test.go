package promobserve_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/backend/observe/promobserve"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter/adaptive"
)

func TestAdaptiveMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := promobserve.NewAdaptive(reg)
	require.NoError(t, err)
	_, err = promobserve.NewAdaptive(reg)
	require.Error(t, err, "registered twice")
	fake := clock.NewFake(time.Unix(0, 0))
	lim, err := adaptive.New(adaptive.Config{Name: "api", Law: adaptive.Fixed{}, Initial: 1, MinSamples: 1,
		Window: time.Nanosecond, Clock: fake, Observer: m.Observer()})
	require.NoError(t, err)
	tok, err := lim.Acquire(context.Background(), adaptive.Critical)
	require.NoError(t, err)
	_, err = lim.Acquire(context.Background(), adaptive.Sheddable)
	require.ErrorIs(t, err, adaptive.ErrLimited)
	fake.Advance(20 * time.Millisecond)
	tok.OnSuccess()
	n, err := testutil.GatherAndCount(reg, "limitkit_adaptive_decisions_total")
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP limitkit_adaptive_window_rtt_seconds Mean latency of the adaptive limiter's last sampling window.
# TYPE limitkit_adaptive_window_rtt_seconds gauge
limitkit_adaptive_window_rtt_seconds{limiter="api"} 0.02
`), "limitkit_adaptive_window_rtt_seconds"))
}
