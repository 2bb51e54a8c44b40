// Command failover shows limiting that survives a Redis outage.
//
//	go run ./examples/failover -redis redis://127.0.0.1:6379/0
//
// It makes a few requests every 250 ms through a fallback store wrapping a
// Redis store and prints what decided them. Stop Redis while it runs: the
// circuit breaker opens and decisions continue, degraded, from a local
// store holding this instance's share of the limit. Start Redis again: the
// breaker probes, closes, and decisions return to Redis.
//
// Without -redis it simulates the outage: the primary (an in-memory store)
// fails from the 2nd to the 5th second.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/storeurl"
	"github.com/limitkit/limitkit/fallback"
	"github.com/limitkit/limitkit/limiter"
)

func main() {
	redisURL := flag.String("redis", "", "Redis URL (redis://host:port/db); empty simulates an outage in memory")
	client := flag.String("client", "go-redis", "Redis client library: go-redis or rueidis")
	duration := flag.Duration("duration", 8*time.Second, "how long to run (0: until interrupted)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	if err := run(ctx, os.Stdout, *redisURL, *client); err != nil {
		fmt.Fprintln(os.Stderr, "failover:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer, redisURL, client string) error {
	logger := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelInfo}))
	// go-redis writes its own lines (a failed dial while Redis is down) to
	// standard error; send them through the same logger.
	redis.SetLogger(redisLogger{logger})
	primary, closePrimary, err := openPrimary(redisURL, client)
	if err != nil {
		return err
	}
	defer closePrimary()

	store, err := fallback.New(primary,
		fallback.WithPolicy(backend.LocalPolicy(2)), // two instances share the limit
		fallback.WithTimeout(50*time.Millisecond),
		fallback.WithFailureThreshold(3),
		fallback.WithOpenTimeout(time.Second),
		fallback.WithLogger(logger))
	if err != nil {
		return err
	}
	lim, err := limiter.New(store, limiter.Config{Algorithm: algorithms.SlidingLog, Limit: 20, Window: 2 * time.Second, Prefix: "failover-demo:"})
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "limit 20 per 2 s for one key, 3 requests every 250 ms; while degraded each of 2 instances holds 10")
	start := time.Now()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		allowed, degraded := 0, 0
		for range 3 {
			d, err := lim.Allow(ctx, "demo-user")
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return nil
			}
			if err != nil {
				return err
			}
			if d.Allowed {
				allowed++
			}
			if d.Degraded {
				degraded++
			}
		}
		source := "redis"
		if redisURL == "" {
			source = "primary"
		}
		if degraded > 0 {
			source = "local (degraded)"
		}
		fmt.Fprintf(out, "t=%4.1fs breaker=%-9s allowed %d/3, decided by %s\n",
			time.Since(start).Seconds(), store.State(), allowed, source)
	}
}

func openPrimary(redisURL, client string) (backend.Store, func(), error) {
	if redisURL == "" {
		m, err := memorystore.New()
		if err != nil {
			return nil, nil, err
		}
		return &outage{Store: m, from: time.Now().Add(2 * time.Second), to: time.Now().Add(5 * time.Second)}, func() {}, nil
	}
	return openRedis(redisURL, client)
}

// outage is a primary that fails between from and to.
type outage struct {
	backend.Store
	from, to time.Time
	calls    atomic.Int64
}

var errSimulated = errors.New("simulated outage: connection refused")

func (o *outage) down() bool {
	o.calls.Add(1)
	now := time.Now()
	return now.After(o.from) && now.Before(o.to)
}

func (o *outage) Take(ctx context.Context, req backend.Request) (backend.Result, error) {
	if o.down() {
		return backend.Result{}, errSimulated
	}
	return o.Store.Take(ctx, req)
}

func (o *outage) Peek(ctx context.Context, req backend.Request) (backend.Result, error) {
	if o.down() {
		return backend.Result{}, errSimulated
	}
	return o.Store.Peek(ctx, req)
}

// openRedis opens the Redis at url (any URL backend/storeurl reads: one
// server, a cluster, Sentinel) through the client library named, go-redis
// or rueidis, checks that it answers, and returns a store over it and a
// function that closes it.
func openRedis(url, client string) (backend.Store, func(), error) {
	opened, err := storeurl.Open(context.Background(), url, storeurl.WithClient(client))
	if err != nil {
		return nil, nil, err
	}
	return opened.Store, func() { _ = opened.Close() }, nil
}

// redisLogger is go-redis's logger on slog.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, fmt.Sprintf(format, v...), "source", "go-redis")
}
