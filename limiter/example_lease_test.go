package limiter_test

import (
	"context"
	"fmt"
	"time"

	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
)

// A lease taken in one place and released by its id in another (another
// goroutine, or another process sharing the store and prefix).
func ExampleLimiter_Release() {
	store, _ := memorystore.New()
	fake := clock.NewFake(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	jobs, _ := limiter.New(store, limiter.Config{Algorithm: "concurrency", Limit: 1, Window: time.Minute,
		Prefix: "reports:"}, limiter.WithClock(fake))
	ctx := context.Background()

	lease, _, _ := jobs.Acquire(ctx, "tenant-9")
	id := lease.ID() // handed to the worker that runs the report

	_, d, _ := jobs.Acquire(ctx, "tenant-9")
	fmt.Println("second report allowed:", d.Allowed)

	fmt.Println("released by id:", jobs.Release(ctx, "tenant-9", id))
	again, _, _ := jobs.Acquire(ctx, "tenant-9")
	fmt.Println("next report gets a lease:", again != nil)
	// Output:
	// second report allowed: false
	// released by id: <nil>
	// next report gets a lease: true
}

// A concurrency limit and a rate limit taken together, all or nothing: a
// request refused for lack of a slot takes no rate unit.
func ExampleComposite_Acquire() {
	store, _ := memorystore.New()
	fake := clock.NewFake(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	hourlyCfg := limiter.Config{Limit: 3, Window: time.Hour, Prefix: "exports:hourly:"}
	c, _ := limiter.NewComposite(store, []limiter.Config{
		{Algorithm: "concurrency", Limit: 1, Window: 30 * time.Second, Prefix: "exports:inflight:"},
		hourlyCfg,
	}, limiter.WithClock(fake))
	ctx := context.Background()

	first, _, _ := c.Acquire(ctx, "ann", "ann")
	fmt.Println("first:", first != nil)
	_, d, _ := c.Acquire(ctx, "ann", "ann") // one in flight already
	fmt.Println("second:", d.Allowed, "denied by rule", d.Rule)
	_ = first.Release(ctx)
	third, d, _ := c.Acquire(ctx, "ann", "ann")
	fmt.Println("third:", d.Allowed)
	_ = third.Release(ctx)
	hourly, _ := limiter.New(store, hourlyCfg, limiter.WithClock(fake)) // the same keys
	p, _ := hourly.Peek(ctx, "ann")
	fmt.Println("hourly left:", p.Remaining) // 2 of 3 taken: the refused one took none
	// Output:
	// first: true
	// second: false denied by rule 0
	// third: true
	// hourly left: 1
}
