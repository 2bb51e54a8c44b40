package config_test

import (
	"context"
	"fmt"
	"time"

	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/config"
)

// Parse a file, build its limiters on the in-memory store, and use one. The
// fake clock makes the output the same on every run.
func ExampleParse() {
	cfg, err := config.Parse([]byte(`
backend:
  url: memory://
policies:
  login:
    limit: 3
    window: 1m
  sms:
    limit: 1
    window: 30s
    guard: {limit: 5, window: 24h}
`), config.YAML)
	if err != nil {
		fmt.Println(err)
		return
	}
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	set, err := cfg.Build(context.Background(), config.WithLimiterOptions(limiter.WithClock(fake)))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer set.Close()

	login := set.Limiter("login")
	fmt.Println("policies:", set.Names(), "login keys under", login.Config().Prefix)
	for i := 1; i <= 4; i++ {
		d, _ := login.Allow(context.Background(), "alice")
		fmt.Printf("attempt %d: allowed %v, remaining %d, retry after %v\n", i, d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// policies: [login sms] login keys under limitkit:login:
	// attempt 1: allowed true, remaining 2, retry after 0s
	// attempt 2: allowed true, remaining 1, retry after 0s
	// attempt 3: allowed true, remaining 0, retry after 0s
	// attempt 4: allowed false, remaining 0, retry after 1m0s
}

// An invalid file is refused with the line and the field at fault.
func ExampleParse_error() {
	_, err := config.Parse([]byte(`
backend:
  url: memory://
policies:
  login:
    limit: 3
    window: 1 minute
`), config.YAML)
	fmt.Println(err)
	// Output:
	// line 7: policies.login.window: "1 minute" is not a duration; write it like "1m", "90s" or "500ms"
}
