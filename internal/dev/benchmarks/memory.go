package benchmarks

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	golimiter "github.com/sethvargo/go-limiter"
	golimitermem "github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	throttledmem "github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ulemem "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/limiter"
)

// MemoryContenders lists the in-process contenders: for each algorithm in
// algorithms.Names (read when called, so new algorithms join by
// themselves) limitkit's memory store called directly with a
// backend.Request stamped with clock.System (limitkit's default clock, as
// the peers read their own), and the same through
// limiter.Limiter; then the peers; then, in Group "experiment", the
// fixed_window limiter with a CoarseClock instead of the system clock, to
// measure what reading the clock costs.
func MemoryContenders() []Contender {
	var cs []Contender
	for _, alg := range algorithms.Names() {
		cs = append(cs,
			Contender{Name: "limitkit store " + string(alg), Group: "limitkit", Algorithm: alg,
				New: func(w Workload) (Decider, func(), error) { return limitkitMemoryStore(w, alg) }},
			Contender{Name: "limitkit limiter " + string(alg), Group: "limitkit", Algorithm: alg,
				New: func(w Workload) (Decider, func(), error) { return limitkitMemoryLimiter(w, alg) }},
		)
	}
	cs = append(cs,
		Contender{Name: "x/time/rate (map+mutex)", Group: "peer", New: xrateMutex},
		Contender{Name: "x/time/rate (sync.Map)", Group: "peer", New: xrateSyncMap},
		Contender{Name: "sethvargo/go-limiter memorystore", Group: "peer", New: goLimiterMemory},
		Contender{Name: "throttled memstore", Group: "peer", New: throttledMemory},
		Contender{Name: "ulule/limiter memory", Group: "peer", New: ululeMemory},
	)
	alg := algorithms.FixedWindow // the cheapest step: where the clock weighs most
	return append(cs, Contender{Name: "limitkit limiter " + string(alg) + ", coarse clock", Group: "experiment", Algorithm: alg,
		New: func(w Workload) (Decider, func(), error) { return limitkitCoarseLimiter(w, alg) }})
}

// CoarseClock is a clock.Clock that reads an atomic millisecond count,
// refreshed every millisecond by a goroutine, instead of reading the clock
// on every request. limitkit decides in whole milliseconds, so it gives
// the same decisions up to one millisecond late, for the price of an
// atomic load.
type CoarseClock struct {
	ms   atomic.Int64
	stop chan struct{}
	done chan struct{}
}

// NewCoarseClock starts a CoarseClock; Close stops it.
func NewCoarseClock() *CoarseClock {
	c := &CoarseClock{stop: make(chan struct{}), done: make(chan struct{})}
	c.ms.Store(time.Now().UnixMilli())
	go func() {
		defer close(c.done)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-c.stop:
				return
			case now := <-t.C:
				c.ms.Store(now.UnixMilli())
			}
		}
	}()
	return c
}

// Now returns the time of the last tick, to the millisecond.
func (c *CoarseClock) Now() time.Time { return time.UnixMilli(c.ms.Load()) }

// Close stops the clock's goroutine.
func (c *CoarseClock) Close() {
	close(c.stop)
	<-c.done
}

func limitkitCoarseLimiter(w Workload, alg algorithms.Name) (Decider, func(), error) {
	s, err := memorystore.New()
	if err != nil {
		return nil, nil, err
	}
	rule := w.Rule(alg)
	clk := NewCoarseClock()
	lim, err := limiter.New(s, limiter.Config{Algorithm: alg, Limit: rule.Limit, Window: rule.Window, Prefix: "bench:"},
		limiter.WithClock(clk))
	if err != nil {
		clk.Close()
		return nil, nil, err
	}
	return func(ctx context.Context, id string) (bool, error) {
		d, err := lim.Allow(ctx, id)
		return d.Allowed, err
	}, clk.Close, nil
}

func limitkitMemoryStore(w Workload, alg algorithms.Name) (Decider, func(), error) {
	s, err := memorystore.New()
	if err != nil {
		return nil, nil, err
	}
	return storeDecider(s, w, alg), func() {}, nil
}

func limitkitMemoryLimiter(w Workload, alg algorithms.Name) (Decider, func(), error) {
	s, err := memorystore.New()
	if err != nil {
		return nil, nil, err
	}
	rule := w.Rule(alg)
	lim, err := limiter.New(s, limiter.Config{Algorithm: alg, Limit: rule.Limit, Window: rule.Window, Prefix: "bench:"})
	if err != nil {
		return nil, nil, err
	}
	if rule.HoldsLeases() {
		// A lease's whole life, as leaseDecider decides on a store.
		return func(ctx context.Context, id string) (bool, error) {
			lease, d, err := lim.Acquire(ctx, id)
			if err != nil || !d.Allowed || w.Deny {
				return d.Allowed, err
			}
			// A lease that outlived a short never-deny window has expired:
			// a report (as the store decider's held=false), not a failure.
			if err := lease.Release(ctx); err != nil && !errors.Is(err, limiter.ErrLeaseNotHeld) {
				return true, err
			}
			return true, nil
		}, func() {}, nil
	}
	return func(ctx context.Context, id string) (bool, error) {
		d, err := lim.Allow(ctx, id)
		return d.Allowed, err
	}, func() {}, nil
}

// xrateLimit returns x/time/rate's limit and burst for the workload.
func xrateLimit(w Workload) (rate.Limit, int) {
	if w.Deny {
		l, win := w.DenyRule()
		return rate.Every(win / time.Duration(l)), int(l)
	}
	return rate.Limit(NeverDenyRate), NeverDenyRate
}

// xrateMutex is the usual way to limit per key with x/time/rate: a map of
// limiters under a mutex.
func xrateMutex(w Workload) (Decider, func(), error) {
	limit, burst := xrateLimit(w)
	var mu sync.Mutex
	m := make(map[string]*rate.Limiter)
	return func(_ context.Context, id string) (bool, error) {
		mu.Lock()
		l := m[id]
		if l == nil {
			l = rate.NewLimiter(limit, burst)
			m[id] = l
		}
		mu.Unlock()
		return l.Allow(), nil
	}, func() {}, nil
}

// xrateSyncMap keeps the limiters in a sync.Map instead.
func xrateSyncMap(w Workload) (Decider, func(), error) {
	limit, burst := xrateLimit(w)
	var m sync.Map
	return func(_ context.Context, id string) (bool, error) {
		v, ok := m.Load(id)
		if !ok {
			v, _ = m.LoadOrStore(id, rate.NewLimiter(limit, burst))
		}
		return v.(*rate.Limiter).Allow(), nil
	}, func() {}, nil
}

func goLimiterMemory(w Workload) (Decider, func(), error) {
	cfg := &golimitermem.Config{Tokens: uint64(NeverDenyLimit), Interval: NeverDenyWindow}
	if w.Deny {
		l, win := w.DenyRule()
		cfg = &golimitermem.Config{Tokens: uint64(l), Interval: win}
	}
	s, err := golimitermem.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	var _ golimiter.Store = s
	return func(ctx context.Context, id string) (bool, error) {
		_, _, _, ok, err := s.Take(ctx, id)
		return ok, err
	}, func() { _ = s.Close(context.Background()) }, nil
}

// throttledQuota returns throttled's GCRA quota for the workload.
func throttledQuota(w Workload) throttled.RateQuota {
	if w.Deny {
		// MaxBurst+1 requests pass at once: the limit's worth.
		l, win := w.DenyRule()
		return throttled.RateQuota{MaxRate: throttled.PerDuration(int(l), win), MaxBurst: int(l) - 1}
	}
	return throttled.RateQuota{MaxRate: throttled.PerSec(NeverDenyRate), MaxBurst: NeverDenyRate}
}

func throttledMemory(w Workload) (Decider, func(), error) {
	st, err := throttledmem.NewCtx(0)
	if err != nil {
		return nil, nil, err
	}
	l, err := throttled.NewGCRARateLimiterCtx(st, throttledQuota(w))
	if err != nil {
		return nil, nil, err
	}
	return throttledDecider(l), func() {}, nil
}

func throttledDecider(l *throttled.GCRARateLimiterCtx) Decider {
	return func(ctx context.Context, id string) (bool, error) {
		limited, _, err := l.RateLimitCtx(ctx, id, 1)
		return !limited, err
	}
}

// ululeRate returns ulule/limiter's rate for the workload.
func ululeRate(w Workload) ulule.Rate {
	if w.Deny {
		l, win := w.DenyRule()
		return ulule.Rate{Period: win, Limit: l}
	}
	return ulule.Rate{Period: NeverDenyWindow, Limit: NeverDenyLimit}
}

func ululeMemory(w Workload) (Decider, func(), error) {
	l := ulule.New(ulemem.NewStore(), ululeRate(w))
	return ululeDecider(l), func() {}, nil
}

func ululeDecider(l *ulule.Limiter) Decider {
	return func(ctx context.Context, id string) (bool, error) {
		c, err := l.Get(ctx, id)
		return !c.Reached, err
	}
}
