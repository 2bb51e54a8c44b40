// Command quickstart shows each limitkit algorithm deciding a short burst.
//
//	go run ./examples/quickstart
//	go run -tags redis ./examples/quickstart -redis redis://127.0.0.1:6379/0 [-client rueidis]
//
// It uses a simulated clock, so it prints the same thing every time. By
// default the state is in memory and no server is needed; with -redis the
// same decisions are made by the Lua scripts inside Redis. The Redis clients
// are linked in only with the redis build tag (redis.go), so that a first
// run compiles limitkit and the standard library alone.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
)

var about = map[algorithms.Name]string{
	algorithms.SlidingLog:     "exact: remembers when each request came",
	algorithms.SlidingCounter: "approximate, constant memory: two weighted windows",
	algorithms.FixedWindow:    "cheapest: one counter per 10 s window",
	algorithms.CompactLog:     "exact, like sliding_log, in 7 bytes per request on Redis",
	algorithms.TwoLevel:       "a counter until a key uses half the limit in a window, then an exact log",
	algorithms.GCRA:           "token bucket: a burst of 5, then one every 2 s",
}

func main() {
	redisURL := flag.String("redis", "", "Redis URL (redis://host:port/db; needs -tags redis); empty keeps the state in memory")
	client := flag.String("client", "go-redis", "Redis client library: go-redis or rueidis (with -tags redis)")
	flag.Parse()
	store, where, closeStore, err := openStore(*redisURL, *client)
	if err == nil {
		defer closeStore()
		err = run(os.Stdout, store, where)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// openRedis opens the Redis store at url through client. It is nil unless
// the program is built with the redis tag (see redis.go).
var openRedis func(url, client string) (backend.Store, func(), error)

// errNoRedis is returned for -redis in a build without the redis tag.
var errNoRedis = errors.New("this build links no Redis client; run it as go run -tags redis ./examples/quickstart -redis URL")

// openStore returns the store to demonstrate on, and where it keeps state.
func openStore(redisURL, client string) (backend.Store, string, func(), error) {
	if redisURL == "" {
		s, err := memorystore.New()
		return s, "in memory", func() {}, err
	}
	if openRedis == nil {
		return nil, "", nil, errNoRedis
	}
	s, closeStore, err := openRedis(redisURL, client)
	return s, "in Redis (" + client + ")", closeStore, err
}

func run(out io.Writer, store backend.Store, where string) error {
	ctx := context.Background()
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	// A fresh prefix per run, so that a Redis store starts empty each time.
	prefix := "quickstart:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	fmt.Fprintln(out, "limitkit quickstart: a limit of 5 requests per 10 s for one user.")
	fmt.Fprintf(out, "The clock is simulated; the state is %s.\n", where)

	for _, alg := range rateAlgorithms() {
		fake := clock.NewFake(start)
		lim, err := limiter.New(store, limiter.Config{Algorithm: alg, Limit: 5, Window: 10 * time.Second, Prefix: prefix + "burst:"},
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
	for _, alg := range rateAlgorithms() {
		fake := clock.NewFake(start.Add(9500 * time.Millisecond))
		lim, err := limiter.New(store, limiter.Config{Algorithm: alg, Limit: 5, Window: 10 * time.Second, Prefix: prefix + "boundary:"},
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

// rateAlgorithms lists the rate-limiting algorithms: those Allow decides.
// A concurrency limit is taken with Acquire and released (examples/uploads).
func rateAlgorithms() []algorithms.Name {
	var names []algorithms.Name
	for _, alg := range algorithms.Names() {
		if !(algorithms.Rule{Algorithm: alg}).HoldsLeases() {
			names = append(names, alg)
		}
	}
	return names
}
