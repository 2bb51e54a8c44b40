package clock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/limitkit/limitkit/clock"
	"github.com/stretchr/testify/require"
)

func TestFakeAdvanceAndSet(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := clock.NewFake(start)
	require.Equal(t, start, c.Now())

	c.Advance(1500 * time.Millisecond)
	require.Equal(t, start.Add(1500*time.Millisecond), c.Now())

	c.Advance(-5 * time.Second)
	require.Equal(t, start.Add(-3500*time.Millisecond), c.Now())

	later := start.Add(time.Hour)
	c.Set(later)
	require.Equal(t, later, c.Now())
}

func TestFakeConcurrentAdvance(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	c := clock.NewFake(start)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				c.Advance(time.Millisecond)
				_ = c.Now()
			}
		}()
	}
	wg.Wait()
	require.Equal(t, start.Add(8000*time.Millisecond), c.Now())
}

func TestSystemClockMoves(t *testing.T) {
	a := clock.System.Now()
	require.False(t, a.IsZero())
	require.WithinDuration(t, time.Now(), a, time.Minute)
}

func TestFakeAfterFiresWhenAdvanced(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	c := clock.NewFake(start)
	ch := clock.After(c, 2*time.Second)
	require.Equal(t, 1, c.Waiters())
	c.Advance(1999 * time.Millisecond)
	select {
	case <-ch:
		t.Fatal("fired early")
	default:
	}
	c.Advance(time.Millisecond)
	require.Equal(t, start.Add(2*time.Second), <-ch)
	require.Zero(t, c.Waiters())

	now := <-clock.After(c, 0)
	require.Equal(t, start.Add(2*time.Second), now)
}

func TestAfterOnSystemClockUsesRealTime(t *testing.T) {
	select {
	case <-clock.After(clock.System, time.Millisecond):
	case <-time.After(time.Minute):
		t.Fatal("system After never fired")
	}
}

func TestCoarse(t *testing.T) {
	_, err := clock.NewCoarse(t.Context(), time.Microsecond)
	require.Error(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	c, err := clock.NewCoarse(ctx, time.Millisecond)
	require.NoError(t, err)
	first := c.Now()
	require.WithinDuration(t, time.Now(), first, time.Second)
	// It moves on its own: wait (bounded) for a refresh.
	deadline := time.Now().Add(5 * time.Second)
	for !c.Now().After(first) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	require.True(t, c.Now().After(first), "the coarse clock never refreshed")
}

func BenchmarkCoarseNow(b *testing.B) {
	c, err := clock.NewCoarse(b.Context(), time.Millisecond)
	require.NoError(b, err)
	for b.Loop() {
		_ = c.Now()
	}
}

func BenchmarkTimeNow(b *testing.B) {
	for b.Loop() {
		_ = time.Now()
	}
}

func TestSystemFollowsTimeNow(t *testing.T) {
	for range 1000 {
		before := time.Now()
		got := clock.System.Now()
		after := time.Now()
		require.False(t, got.Before(before), "%v before %v", got, before)
		require.False(t, got.After(after), "%v after %v", got, after)
	}
}

func BenchmarkSystemNow(b *testing.B) {
	for b.Loop() {
		_ = clock.System.Now()
	}
}
