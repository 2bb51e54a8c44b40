package clock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/clock"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// remote is a fake time source ahead of a fake local clock by ahead; each
// probe advances the local clock by its round trip, split into out and back.
type remote struct {
	mu       sync.Mutex
	local    *clock.Fake
	ahead    time.Duration
	out      []time.Duration // per call, cycling; back is the same
	back     []time.Duration
	calls    int
	fail     error
	observed atomic.Int64
}

func (r *remote) probe(ctx context.Context) (time.Time, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.observed.Add(1)
	if r.fail != nil {
		return time.Time{}, r.fail
	}
	i := r.calls
	r.calls++
	out, back := time.Duration(0), time.Duration(0)
	if len(r.out) > 0 {
		out, back = r.out[i%len(r.out)], r.back[i%len(r.back)]
	}
	r.local.Advance(out)
	t := r.local.Now().Add(r.ahead)
	r.local.Advance(back)
	return t, nil
}

func (r *remote) set(ahead time.Duration, fail error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ahead, r.fail = ahead, fail
}

func TestOffsetMeasuresHalfTheRoundTrip(t *testing.T) {
	local := clock.NewFake(epoch)
	// Symmetric 10 ms each way: the midpoint is exact.
	r := &remote{local: local, ahead: 5 * time.Second,
		out: []time.Duration{10 * time.Millisecond}, back: []time.Duration{10 * time.Millisecond}}
	o, err := clock.NewOffset(t.Context(), local, r.probe, 0)
	require.NoError(t, err)
	defer o.Close()
	require.Equal(t, 5*time.Second, o.Offset())
	require.Equal(t, local.Now().Add(5*time.Second), o.Now())
	require.NoError(t, o.Err())
}

func TestOffsetKeepsTheFastestProbe(t *testing.T) {
	local := clock.NewFake(epoch)
	// The first probe is slow and lopsided (90 ms out, 10 ms back: its
	// midpoint is off by 40 ms); the second is fast and symmetric.
	r := &remote{local: local, ahead: -2 * time.Second,
		out:  []time.Duration{90 * time.Millisecond, time.Millisecond, 30 * time.Millisecond},
		back: []time.Duration{10 * time.Millisecond, time.Millisecond, 2 * time.Millisecond}}
	o, err := clock.NewOffset(t.Context(), local, r.probe, 0)
	require.NoError(t, err)
	require.Equal(t, -2*time.Second, o.Offset())
	require.NoError(t, o.Close())
}

func TestOffsetFirstMeasurementFails(t *testing.T) {
	boom := errors.New("boom")
	r := &remote{local: clock.NewFake(epoch), fail: boom}
	_, err := clock.NewOffset(t.Context(), nil, r.probe, time.Millisecond)
	require.ErrorIs(t, err, boom)
	_, err = clock.NewOffset(t.Context(), nil, nil, 0)
	require.Error(t, err)
	_, err = clock.NewOffset(t.Context(), nil, r.probe, -time.Second)
	require.Error(t, err)
}

func TestOffsetRefreshesAndStops(t *testing.T) {
	local := clock.NewFake(epoch)
	r := &remote{local: local, ahead: time.Second}
	o, err := clock.NewOffset(t.Context(), local, r.probe, time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, time.Second, o.Offset())

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			require.False(t, time.Now().After(deadline), "timed out waiting for %s", what)
			time.Sleep(time.Millisecond)
		}
	}
	r.set(7*time.Second, nil)
	waitFor("the new offset", func() bool { return o.Offset() == 7*time.Second })

	// A failing refresh keeps the last offset and reports the error.
	boom := errors.New("source down")
	r.set(9*time.Second, boom)
	waitFor("the refresh error", func() bool { return errors.Is(o.Err(), boom) })
	require.Equal(t, 7*time.Second, o.Offset())
	r.set(9*time.Second, nil)
	waitFor("recovery", func() bool { return o.Err() == nil && o.Offset() == 9*time.Second })

	// After Close returns the goroutine is gone: no probe runs again.
	require.NoError(t, o.Close())
	require.NoError(t, o.Close())
	calls := r.observed.Load()
	time.Sleep(20 * time.Millisecond)
	require.Equal(t, calls, r.observed.Load())
	require.Equal(t, local.Now().Add(9*time.Second), o.Now())
}

func TestOffsetConcurrentReads(t *testing.T) {
	local := clock.NewFake(epoch)
	r := &remote{local: local, ahead: time.Second}
	o, err := clock.NewOffset(t.Context(), local, r.probe, time.Millisecond)
	require.NoError(t, err)
	defer o.Close()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 1000 {
				_ = o.Now()
			}
		})
	}
	wg.Wait()
}
