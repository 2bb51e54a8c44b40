package fallback_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/fallback"
	"github.com/limitkit/limitkit/limiter"
)

// goneRedis is a primary store whose every call fails, as a Redis that is gone.
type goneRedis struct{}

var errRedisGone = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")

func (goneRedis) Take(context.Context, backend.Request) (backend.Result, error) {
	return backend.Result{}, errRedisGone
}

func (goneRedis) Peek(context.Context, backend.Request) (backend.Result, error) {
	return backend.Result{}, errRedisGone
}

func (goneRedis) Reset(context.Context, backend.Key, algorithms.Rule, time.Time) error {
	return errRedisGone
}

func (goneRedis) TakeAll(context.Context, []backend.Request) (backend.Result, error) {
	return backend.Result{}, errRedisGone
}

// While the primary is down, each limit follows its own failure policy and
// callers see decisions marked Degraded, not errors: here the store's
// default keeps half of each limit in process (two instances share it), a
// login limit fails open and a payment limit fails closed.
func ExampleNew() {
	guard, err := fallback.New(goneRedis{},
		fallback.WithPolicy(backend.LocalPolicy(2)),
		fallback.WithOpenTimeout(time.Hour), // no probe during the example
		fallback.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println(err)
		return
	}
	fake := clock.NewFake(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	api, _ := limiter.New(guard, limiter.Config{Limit: 4, Window: time.Minute, Prefix: "api:"}, limiter.WithClock(fake))
	login, _ := limiter.New(guard, limiter.Config{Limit: 1, Window: time.Minute, Prefix: "login:",
		OnFailure: backend.FailOpen}, limiter.WithClock(fake))
	pay, _ := limiter.New(guard, limiter.Config{Limit: 1, Window: time.Minute, Prefix: "pay:",
		OnFailure: backend.FailClosed}, limiter.WithClock(fake))
	ctx := context.Background()

	for i := range 3 {
		d, err := api.Allow(ctx, "ann")
		fmt.Printf("api %d: allowed %v, degraded %v, err %v\n", i+1, d.Allowed, d.Degraded, err)
	}
	for i := range 2 {
		d, _ := login.Allow(ctx, "ann")
		fmt.Printf("login %d: allowed %v, degraded %v\n", i+1, d.Allowed, d.Degraded)
	}
	d, _ := pay.Allow(ctx, "ann")
	fmt.Printf("pay: allowed %v, degraded %v\n", d.Allowed, d.Degraded)
	fmt.Println("breaker:", guard.State())
	// Output:
	// api 1: allowed true, degraded true, err <nil>
	// api 2: allowed true, degraded true, err <nil>
	// api 3: allowed false, degraded true, err <nil>
	// login 1: allowed true, degraded true
	// login 2: allowed true, degraded true
	// pay: allowed false, degraded true
	// breaker: open
}
