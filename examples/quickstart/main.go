// Command quickstart shows each limitkit algorithm deciding a short burst.
//
//	go run ./examples/quickstart
//
// It runs on the in-memory store with a simulated clock, so it needs no
// server and prints the same thing every time.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
)

var about = map[algorithms.Name]string{
	algorithms.SlidingLog:     "exact: remembers when each request came",
	algorithms.SlidingCounter: "approximate, constant memory: two weighted windows",
	algorithms.FixedWindow:    "cheapest: one counter per 10 s window",
}

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(out io.Writer) error {
	ctx := context.Background()
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	fmt.Fprintln(out, "limitkit quickstart: a limit of 5 requests per 10 s for one user.")
	fmt.Fprintln(out, "The clock is simulated; the store is in memory.")

	for _, alg := range algorithms.Names() {
		store, err := memorystore.New()
		if err != nil {
			return err
		}
		fake := clock.NewFake(start)
		lim, err := limiter.New(store, limiter.Config{Algorithm: alg, Limit: 5, Window: 10 * time.Second},
			limiter.WithClock(fake))
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "\n%s (%s)\n", alg, about[alg])
		var last limiter.Decision
		for i := 1; i <= 7; i++ {
			d, err := lim.Allow(ctx, "alice")
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "  t=%-5s request %d: %s\n", elapsed(fake, start), i, describe(d))
			last = d
			fake.Advance(500 * time.Millisecond)
		}
		fake.Set(start.Add(3 * time.Second).Add(last.RetryAfter))
		d, err := lim.Allow(ctx, "alice")
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "  t=%-5s after the RetryAfter of request 7: %s\n", elapsed(fake, start), describe(d))
	}

	fmt.Fprintln(out, "\nA burst across a window boundary: 5 requests at t=9.5s, 5 more at t=10.5s.")
	for _, alg := range algorithms.Names() {
		store, err := memorystore.New()
		if err != nil {
			return err
		}
		fake := clock.NewFake(start.Add(9500 * time.Millisecond))
		lim, err := limiter.New(store, limiter.Config{Algorithm: alg, Limit: 5, Window: 10 * time.Second},
			limiter.WithClock(fake))
		if err != nil {
			return err
		}
		admitted := 0
		for i := range 10 {
			if i == 5 {
				fake.Advance(time.Second)
			}
			d, err := lim.Allow(ctx, "bob")
			if err != nil {
				return err
			}
			if d.Allowed {
				admitted++
			}
		}
		fmt.Fprintf(out, "  %-16s admitted %2d of 10 within one second\n", alg, admitted)
	}
	fmt.Fprintln(out, "\nfixed_window lets up to twice the limit through around a boundary; the sliding algorithms do not.")
	return nil
}

func elapsed(c clock.Clock, start time.Time) string {
	return fmt.Sprintf("%.1fs", c.Now().Sub(start).Seconds())
}

func describe(d limiter.Decision) string {
	if d.Allowed {
		return fmt.Sprintf("allowed, %d left", d.Remaining)
	}
	return fmt.Sprintf("denied, retry in %v", d.RetryAfter)
}
