package observe_test

import (
	"context"
	"fmt"
	"time"

	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/observe"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
)

func ExampleWrap() {
	mem, _ := memorystore.New()
	obs := observe.Observer{
		OnDecision: func(_ context.Context, d observe.Decision) {
			fmt.Println(d.Op, d.Policy, d.Outcome(), "degraded:", d.Degraded)
		},
	}
	fake := clock.NewFake(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	lim, _ := limiter.New(observe.Wrap(mem, obs), limiter.Config{Limit: 1, Window: time.Minute, Prefix: "login:"},
		limiter.WithClock(fake))
	ctx := context.Background()
	_, _ = lim.Allow(ctx, "alice")
	_, _ = lim.Allow(ctx, "alice")
	// Output:
	// take login: allowed degraded: false
	// take login: denied degraded: false
}

func ExampleWatchEvictions() {
	mem, _ := memorystore.New(memorystore.WithMaxKeys(1))
	w, _ := observe.WatchEvictions("local", mem, observe.Observer{
		OnEvictions: func(e observe.Evictions) { fmt.Printf("%s evicted %d active keys\n", e.Store, e.Active) },
	})
	fake := clock.NewFake(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	lim, _ := limiter.New(mem, limiter.Config{Limit: 5, Window: time.Minute}, limiter.WithClock(fake))
	_, _ = lim.Allow(context.Background(), "a")
	_, _ = lim.Allow(context.Background(), "b") // no room: "a" is evicted inside its window
	w.Check()                                   // in a service: go w.Run(ctx, time.Minute)
	// Output:
	// local evicted 1 active keys
}
