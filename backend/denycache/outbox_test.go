package denycache_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/denycache"
	"github.com/limitkit/limitkit/backend/memorystore"
)

// stalledBus is a bus whose Publish hangs until its context ends or the
// bus is released, as over a stopped Redis with a long client timeout.
type stalledBus struct {
	release chan struct{}
	once    sync.Once
}

func (b *stalledBus) Publish(ctx context.Context, _, _ string) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-b.release:
		return errors.New("released")
	}
}

func (b *stalledBus) Listen(ctx context.Context, _ string, _ func(string)) error {
	<-ctx.Done()
	return ctx.Err()
}

func (b *stalledBus) free() { b.once.Do(func() { close(b.release) }) }

// TestStalledBusDoesNotHoldCalls: with a bus that never answers, Take,
// TakeAll and GiveBack return without waiting on it (they used to publish
// on the caller's goroutine, bounded only by the caller's context), and
// the messages past the queue are dropped and counted.
func TestStalledBusDoesNotHoldCalls(t *testing.T) {
	bus := &stalledBus{release: make(chan struct{})}
	t.Cleanup(bus.free)
	mem, err := memorystore.New()
	require.NoError(t, err)
	cache, err := denycache.New(mem, bus, denycache.WithProbeInterval(time.Hour))
	require.NoError(t, err)
	defer cache.Close()
	defer bus.free() // Close waits for the sender's Publish

	done := make(chan error, 1)
	calls := denycache.DefaultOutbox + 500
	go func() {
		ctx := context.Background() // no deadline: as /json or a client without one
		for i := range calls {
			// A new rule per call: each is announced.
			rule := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: int64(i + 1), Window: time.Minute}
			req := backend.Request{Key: backend.Key{Prefix: "s:", ID: "k"}, Rule: rule, Now: time.UnixMilli(1_700_000_000_000), Cost: 1}
			if _, err := cache.Take(ctx, req); err != nil {
				done <- err
				return
			}
			if i%100 == 0 {
				if _, err := cache.TakeAll(ctx, []backend.Request{req}); err != nil {
					done <- err
					return
				}
				if _, err := cache.GiveBack(ctx, req); err != nil {
					done <- err
					return
				}
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("calls still held by a stalled bus after 30s")
	}
	st := cache.Stats()
	require.Positive(t, st.Dropped, "messages past the queue are counted")
	t.Logf("%d calls with the bus stalled: %d messages dropped", calls, st.Dropped)
}

// TestBrokenSubscriptionStats: a reader never sees Listening false with
// an entry still held. The cache clears listening, then flushes; Stats
// read in between saw both (TestBrokenSubscription failed once so). The
// control reads without the lock and catches the entry.
func TestBrokenSubscriptionStats(t *testing.T) {
	for _, control := range []bool{false, true} {
		name := "fixed"
		if control {
			name = "control"
		}
		t.Run(name, func(t *testing.T) {
			denycache.SlowFlushForTest(t, 50*time.Millisecond)
			if control {
				denycache.UnlockedStatsForTest(t)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			cache, bus, _ := cacheHoldingOneDenial(t, ctx)
			bus.setDown(true)
			var st denycache.Stats
			for st = cache.Stats(); st.Listening; st = cache.Stats() {
				require.NoError(t, ctx.Err(), "the cache never noticed that its subscription broke")
				time.Sleep(time.Millisecond)
			}
			if control {
				require.Equal(t, 1, st.Entries, "the control: without the lock a reader sees the entry after Listening turned false")
				return
			}
			require.Zero(t, st.Entries)
		})
	}
}
