package adaptive

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/clock"
)

// A window's samples are the requests admitted under its limit: one
// admitted before the window began (under the limit before) is not
// counted when it ends, however slow.
func TestWindowCountsOnlyItsOwnAdmissions(t *testing.T) {
	fake := clock.NewFake(t0)
	var windows []Window
	lim, err := New(Config{Law: Fixed{}, Initial: 10, Window: 10 * time.Millisecond, MinSamples: 1, Clock: fake,
		Observer: Observer{OnLimit: func(c LimitChange) { windows = append(windows, c.Window) }}})
	require.NoError(t, err)
	ctx := context.Background()
	old, err := lim.Acquire(ctx, Default)
	require.NoError(t, err)
	fake.Advance(10 * time.Millisecond)
	first, err := lim.Acquire(ctx, Default)
	require.NoError(t, err)
	first.OnSuccess() // closes the first window
	require.Len(t, windows, 1)

	fresh, err := lim.Acquire(ctx, Default)
	require.NoError(t, err)
	fake.Advance(time.Second)
	old.OnSuccess() // admitted before this window: not a sample
	fresh.OnSuccess()
	require.Len(t, windows, 2)
	require.Equal(t, 1, windows[1].Samples)
	require.Equal(t, time.Second, windows[1].RTT, "control: the fresh request is counted")
	require.Equal(t, time.Second, windows[1].P90)
}
