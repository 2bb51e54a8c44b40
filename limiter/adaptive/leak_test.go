package adaptive

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestNoSlotLeaks: under a storm of acquires with every ending (granted,
// shed, expired, canceled) and every release, no slot and no waiter is
// left behind. Bounded: 4000 requests.
func TestNoSlotLeaks(t *testing.T) {
	for _, lifo := range []bool{false, true} {
		lim, err := New(Config{Law: &Gradient2{}, Initial: 8, Window: time.Millisecond, MinSamples: 1,
			QueueSize: 6, MaxWait: 2 * time.Millisecond, LIFO: lifo})
		require.NoError(t, err)
		var wg sync.WaitGroup
		sem := make(chan struct{}, 64)
		for i := range 4000 {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				r := rand.New(rand.NewPCG(uint64(i), 7))
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(r.IntN(3000))*time.Microsecond)
				defer cancel()
				tok, err := lim.Acquire(ctx, Priority(r.IntN(3)-1))
				if err != nil {
					return
				}
				time.Sleep(time.Duration(r.IntN(500)) * time.Microsecond)
				[]func(){tok.OnSuccess, tok.OnDropped, tok.OnIgnore}[r.IntN(3)]()
			}()
		}
		wg.Wait()
		require.Zero(t, lim.InFlight(), "lifo %v", lifo)
		require.Zero(t, lim.queuedCount(), "lifo %v", lifo)
	}
}
