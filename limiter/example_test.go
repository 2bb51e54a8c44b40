package limiter_test

import (
	"context"
	"fmt"
	"time"

	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
)

func Example() {
	store, _ := memorystore.New()
	fake := clock.NewFake(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	lim, err := limiter.New(store, limiter.Config{Limit: 3, Window: time.Minute, Prefix: "api:"}, limiter.WithClock(fake))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 4 {
		d, _ := lim.Allow(ctx, "alice")
		fmt.Printf("allowed=%v remaining=%d retry-after=%v\n", d.Allowed, d.Remaining, d.RetryAfter)
		fake.Advance(10 * time.Second)
	}
	// Output:
	// allowed=true remaining=2 retry-after=0s
	// allowed=true remaining=1 retry-after=0s
	// allowed=true remaining=0 retry-after=0s
	// allowed=false remaining=0 retry-after=30s
}

func ExampleLimiter_AllowN() {
	store, _ := memorystore.New()
	fake := clock.NewFake(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	lim, _ := limiter.New(store, limiter.Config{Algorithm: "fixed_window", Limit: 10, Window: time.Minute}, limiter.WithClock(fake))
	ctx := context.Background()

	d, _ := lim.AllowN(ctx, "batch-job", 8)
	fmt.Println(d.Allowed, d.Remaining)
	d, _ = lim.AllowN(ctx, "batch-job", 3) // all or nothing: denied, nothing consumed
	fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
	d, _ = lim.AllowN(ctx, "batch-job", 2)
	fmt.Println(d.Allowed, d.Remaining)
	// Output:
	// true 2
	// false 2 1m0s
	// true 0
}

func ExampleLimiter_Peek() {
	store, _ := memorystore.New()
	fake := clock.NewFake(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	lim, _ := limiter.New(store, limiter.Config{Limit: 2, Window: time.Second}, limiter.WithClock(fake))
	ctx := context.Background()

	_, _ = lim.Allow(ctx, "bob")
	p, _ := lim.Peek(ctx, "bob")
	fmt.Println(p.Allowed, p.Remaining) // Peek counts nothing
	p, _ = lim.Peek(ctx, "bob")
	fmt.Println(p.Allowed, p.Remaining)
	// Output:
	// true 1
	// true 1
}

func ExampleGuard() {
	store, _ := memorystore.New()
	fake := clock.NewFake(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	// 2 payments a minute, and at most 3 a day whatever happens to the
	// minute's log.
	lim, _ := limiter.New(store, limiter.Config{Limit: 2, Window: time.Minute, Prefix: "pay:",
		Guard: &limiter.Guard{Limit: 3, Window: 24 * time.Hour}}, limiter.WithClock(fake))
	ctx := context.Background()
	for range 3 {
		a, _ := lim.Allow(ctx, "acct-7")
		b, _ := lim.Allow(ctx, "acct-7")
		fmt.Printf("allowed=%v rule=%d, allowed=%v rule=%d\n", a.Allowed, a.Rule, b.Allowed, b.Rule)
		fake.Advance(time.Minute)
	}
	// Output:
	// allowed=true rule=0, allowed=true rule=0
	// allowed=true rule=1, allowed=false rule=1
	// allowed=false rule=1, allowed=false rule=1
}

func ExampleComposite() {
	store, _ := memorystore.New()
	fake := clock.NewFake(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	c, _ := limiter.NewComposite(store, []limiter.Config{
		{Limit: 2, Window: time.Second, Prefix: "user:"},
		{Limit: 3, Window: time.Second, Prefix: "tenant:"},
	}, limiter.WithClock(fake))
	ctx := context.Background()
	for _, user := range []string{"ann", "ann", "ann", "bob", "bob"} {
		d, _ := c.Allow(ctx, user, "acme")
		fmt.Printf("%s allowed=%v rule=%d\n", user, d.Allowed, d.Rule)
	}
	// Output:
	// ann allowed=true rule=0
	// ann allowed=true rule=0
	// ann allowed=false rule=0
	// bob allowed=true rule=1
	// bob allowed=false rule=1
}

func ExampleLimiter_Acquire() {
	store, _ := memorystore.New()
	fake := clock.NewFake(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	// At most 2 uploads in flight per user; a lease not released within
	// 30 s (its holder crashed) frees its slot on its own.
	uploads, _ := limiter.New(store, limiter.Config{Algorithm: "concurrency", Limit: 2, Window: 30 * time.Second,
		Prefix: "uploads:"}, limiter.WithClock(fake))
	ctx := context.Background()

	first, _, _ := uploads.Acquire(ctx, "ann")
	fake.Advance(time.Second)
	crashed, _, _ := uploads.Acquire(ctx, "ann")
	third, d, _ := uploads.Acquire(ctx, "ann")
	fmt.Println(third == nil, d.RetryAfter) // both slots held: the first times out in 29 s

	fmt.Println(first.Release(ctx)) // the first upload is done
	again, _, _ := uploads.Acquire(ctx, "ann")
	fmt.Println(again != nil)

	fake.Advance(30 * time.Second) // the crashed holder never released
	fmt.Println(crashed.Release(ctx))
	// Output:
	// true 29s
	// <nil>
	// true
	// limiter: release of the lease on "ann": limiter: lease not held (it expired, or its key was reset)
}
