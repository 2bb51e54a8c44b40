package config_test

import (
	"context"
	"fmt"
	"time"

	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/config"
)

// parse reads a YAML file's text; the examples' texts are valid.
func parse(text string) *config.Config {
	cfg, err := config.Parse([]byte(text), config.YAML)
	if err != nil {
		panic(err)
	}
	return cfg
}

// A reload changes the limits of a running set in one step and keeps what
// the keys have counted. A file that does not validate fails Parse (or
// ReloadFile) and changes nothing.
func ExampleSet_Reload() {
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	set, err := parse("backend: {url: memory://}\npolicies:\n  api: {limit: 2, window: 1m}\n").
		Build(context.Background(), config.WithLimiterOptions(limiter.WithClock(fake)))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer set.Close()
	api := set.Limiter("api")
	ctx := context.Background()
	for range 3 {
		d, _ := api.Allow(ctx, "ann")
		fmt.Println("allowed", d.Allowed, "remaining", d.Remaining)
	}

	fmt.Println("reload:", set.Reload(parse("backend: {url: memory://}\npolicies:\n  api: {limit: 5, window: 1m}\n")))
	d, _ := api.Allow(ctx, "ann") // 2 counted before the reload, of 5 now
	fmt.Println("allowed", d.Allowed, "remaining", d.Remaining)

	_, err = config.Parse([]byte("backend: {url: memory://}\npolicies:\n  api: {limit: 0, window: 1m}\n"), config.YAML)
	fmt.Println("bad file:", err)
	fmt.Println("limit in force:", api.Config().Limit)
	// Output:
	// allowed true remaining 1
	// allowed true remaining 0
	// allowed false remaining 0
	// reload: <nil>
	// allowed true remaining 2
	// bad file: line 3: policies.api.limit: limit is 0; it must be at least 1
	// limit in force: 5
}

// The plans of a file are its policies; the resolver names one per key.
func ExampleSet_Plans() {
	set, err := parse("backend: {url: memory://}\npolicies:\n  free: {limit: 1, window: 1m}\n  pro: {limit: 100, window: 1m}\n").
		Build(context.Background())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer set.Close()
	plans, err := set.Plans(func(_ context.Context, apiKey string) (string, error) {
		if apiKey == "key-acme" {
			return "pro", nil
		}
		return "free", nil
	}, "free", "pro")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, key := range []string{"key-ann", "key-ann", "key-acme"} {
		d, plan, _ := plans.Allow(context.Background(), key)
		fmt.Println(key, plan, d.Allowed, d.Remaining)
	}
	// Output:
	// key-ann free true 0
	// key-ann free false 0
	// key-acme pro true 99
}
