package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
)

// Two tiers on one store: the resolver picks each request's plan from its
// API key, and each plan counts under its own prefix.
func ExampleNewPlans() {
	store, _ := memorystore.New()
	fake := clock.NewFake(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	free, _ := limiter.New(store, limiter.Config{Limit: 2, Window: time.Minute, Prefix: "api:free:"}, limiter.WithClock(fake))
	pro, _ := limiter.New(store, limiter.Config{Limit: 5, Window: time.Minute, Prefix: "api:pro:"}, limiter.WithClock(fake))
	plans, err := limiter.NewPlans(map[string]*limiter.Limiter{"free": free, "pro": pro},
		func(_ context.Context, apiKey string) (string, error) {
			tier, _, ok := strings.Cut(apiKey, "-")
			if !ok {
				return "", errors.New("not an API key")
			}
			return tier, nil
		})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	for _, key := range []string{"free-ann", "free-ann", "free-ann", "pro-acme", "gold-bob"} {
		d, plan, err := plans.Allow(ctx, key)
		if err != nil {
			fmt.Printf("%s: %v (unknown plan: %v)\n", key, err, errors.Is(err, limiter.ErrUnknownPlan))
			continue
		}
		fmt.Printf("%s: plan %s, allowed %v, remaining %d\n", key, plan, d.Allowed, d.Remaining)
	}
	// Output:
	// free-ann: plan free, allowed true, remaining 1
	// free-ann: plan free, allowed true, remaining 0
	// free-ann: plan free, allowed false, remaining 0
	// pro-acme: plan pro, allowed true, remaining 4
	// gold-bob: limiter: unknown plan "gold"; the plans are ["free" "pro"] (unknown plan: true)
}
