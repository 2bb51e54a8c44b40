package limiter_test

import (
	"context"
	"fmt"
	"time"

	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
)

// A limit raised while it serves keeps what the key has counted; an invalid
// configuration is refused and the old one stays in force.
func ExampleLimiter_SetConfig() {
	store, _ := memorystore.New()
	fake := clock.NewFake(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	lim, _ := limiter.New(store, limiter.Config{Limit: 4, Window: time.Minute, Prefix: "api:"}, limiter.WithClock(fake))
	ctx := context.Background()
	for range 3 {
		_, _ = lim.Allow(ctx, "ann")
	}

	cfg := lim.Config()
	cfg.Limit = 8
	fmt.Println(lim.SetConfig(cfg))
	d, _ := lim.Allow(ctx, "ann") // 3 taken of 8 before this one
	fmt.Println("allowed", d.Allowed, "remaining", d.Remaining)

	cfg.Limit = 0
	fmt.Println(lim.SetConfig(cfg))
	fmt.Println("limit in force:", lim.Config().Limit)
	// Output:
	// <nil>
	// allowed true remaining 4
	// limiter: limit is 0; it must be at least 1
	// limit in force: 8
}

// A limit in shadow mode is counted as if enforced but never denies: the
// decision says it would have.
func ExampleMode() {
	store, _ := memorystore.New()
	fake := clock.NewFake(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	lim, _ := limiter.New(store, limiter.Config{Limit: 10, Window: time.Minute, Prefix: "api:",
		Guard: &limiter.Guard{Limit: 2, Window: 24 * time.Hour, Mode: limiter.Shadow}}, // a daily cap being tried
		limiter.WithClock(fake))
	ctx := context.Background()
	for range 3 {
		d, _ := lim.Allow(ctx, "ann")
		fmt.Printf("allowed %v, shadow denied %v\n", d.Allowed, d.ShadowDenied)
	}
	// Output:
	// allowed true, shadow denied false
	// allowed true, shadow denied false
	// allowed true, shadow denied true
}

// Exempt keys are never limited and deny-listed keys always denied, before
// any store call; address entries match keys that are addresses.
func ExampleConfig_lists() {
	store, _ := memorystore.New()
	lim, err := limiter.New(store, limiter.Config{Limit: 1, Window: time.Minute, Prefix: "api:",
		Exempt: []string{"health-checker", "10.0.0.0/8"},
		Deny:   []string{"203.0.113.0/24"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	for _, key := range []string{"10.1.2.3", "10.1.2.3", "203.0.113.9", "198.51.100.1", "198.51.100.1"} {
		d, _ := lim.Allow(ctx, key)
		fmt.Printf("%-13s allowed %-5v exempt %-5v deny-listed %v\n", key, d.Allowed, d.Exempt, d.DenyListed)
	}

	_, err = limiter.New(store, limiter.Config{Limit: 1, Window: time.Minute, Exempt: []string{"10.0.0.1/8"}})
	fmt.Println(err)
	// Output:
	// 10.1.2.3      allowed true  exempt true  deny-listed false
	// 10.1.2.3      allowed true  exempt true  deny-listed false
	// 203.0.113.9   allowed false exempt false deny-listed true
	// 198.51.100.1  allowed true  exempt false deny-listed false
	// 198.51.100.1  allowed false exempt false deny-listed false
	// limiter: exempt entry "10.0.0.1/8": has host bits set; write 10.0.0.0/8
}
