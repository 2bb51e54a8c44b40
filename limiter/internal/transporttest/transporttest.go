// Package transporttest holds the test helpers limiter/httplimit and
// limiter/grpclimit share: a limiter on a memory store with a fake clock,
// a bounded wait, and the reload loop their defect tests drive.
package transporttest

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
)

// Start is the fake clocks' start.
var Start = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// NewLimiter returns a limiter for cfg on store (a new memory store when
// nil) driven by a fake clock at Start.
func NewLimiter(t testing.TB, store backend.Store, cfg limiter.Config) (*limiter.Limiter, *clock.Fake) {
	t.Helper()
	if store == nil {
		s, err := memorystore.New()
		if err != nil {
			t.Fatal(err)
		}
		store = s
	}
	fake := clock.NewFake(Start)
	lim, err := limiter.New(store, cfg, limiter.WithClock(fake))
	if err != nil {
		t.Fatal(err)
	}
	return lim, fake
}

// WaitFor polls cond until it holds or 10 s pass (a hang, not a timing
// assertion: the condition is met at once on a working system).
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// The configurations ReloadLoop switches between; neither denies the
// requests of a test.
var (
	LeaseConfig = limiter.Config{Algorithm: "concurrency", Limit: 1000, Window: time.Minute, Prefix: "rl:"}
	RateConfig  = limiter.Config{Algorithm: "fixed_window", Limit: 1 << 40, Window: time.Hour, Prefix: "rl:"}
)

// ReloadLoop runs serve (one request; false when it failed) from 4
// workers, 4,000 times each or for 20 s, while lim switches between
// LeaseConfig and RateConfig as fast as it can. It fails t unless the
// configuration changed and every request succeeded.
func ReloadLoop(t testing.TB, lim *limiter.Limiter, serve func() bool) {
	t.Helper()
	done := make(chan struct{})
	var flips atomic.Int64
	flipped := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-done:
				flipped <- nil
				return
			default:
			}
			cfg := RateConfig
			if i%2 == 1 {
				cfg = LeaseConfig
			}
			if err := lim.SetConfig(cfg); err != nil {
				flipped <- err
				return
			}
			flips.Add(1)
		}
	}()
	const workers, each = 4, 4000
	deadline := time.Now().Add(20 * time.Second)
	var failed, served atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := 0; i < each && time.Now().Before(deadline); i++ {
				served.Add(1)
				if !serve() {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(done)
	if err := <-flipped; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d requests, %d failed, across %d configuration changes", served.Load(), failed.Load(), flips.Load())
	if flips.Load() == 0 {
		t.Fatal("the configuration never changed: the test proved nothing")
	}
	if failed.Load() > 0 {
		t.Errorf("%d of %d requests failed by a reload to or from concurrency", failed.Load(), served.Load())
	}
}
