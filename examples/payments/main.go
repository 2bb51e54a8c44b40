// Command payments shows a limit for an endpoint that moves money: an order
// endpoint limited per user by an exact sliding log (5 orders a minute),
// with a daily fixed-window guard (12 orders a day) that fails closed while
// the shared store is unavailable.
//
//	go run ./examples/payments
//	go run ./examples/payments -redis redis://127.0.0.1:6379/0 [-client rueidis]
//
// It drives the HTTP handler in-process on a simulated clock, so it prints
// the same thing every time. The outage is simulated: the primary store
// (memory, or Redis with -redis) is switched to failing for a while. During
// it the per-user limit would go on locally, but the guard fails closed, so
// no order is accepted until the primary is back.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/storeurl"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/fallback"
	"github.com/limitkit/limitkit/limiter"
)

func main() {
	redisURL := flag.String("redis", "", "Redis URL (redis://host:port/db); empty keeps the state in memory")
	client := flag.String("client", "go-redis", "Redis client library: go-redis or rueidis")
	flag.Parse()
	primary, _, closePrimary, err := openStore(*redisURL, *client)
	if err == nil {
		defer closePrimary()
		err = run(os.Stdout, primary)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "payments:", err)
		os.Exit(1)
	}
}

// switchable is a primary store that fails while down is set, as Redis
// does during an outage.
type switchable struct {
	backend.Store
	down atomic.Bool
}

var errOutage = errors.New("simulated outage: connection refused")

func (s *switchable) Take(ctx context.Context, req backend.Request) (backend.Result, error) {
	if s.down.Load() {
		return backend.Result{}, errOutage
	}
	return s.Store.Take(ctx, req)
}

func (s *switchable) TakeAll(ctx context.Context, reqs []backend.Request) (backend.Result, error) {
	if s.down.Load() {
		return backend.Result{}, errOutage
	}
	return s.Store.TakeAll(ctx, reqs)
}

// orders is the order endpoint: POST /orders with the user in X-User.
func orders(lim *limiter.Limiter) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user := r.Header.Get("X-User")
		if user == "" {
			http.Error(w, "missing X-User", http.StatusBadRequest)
			return
		}
		d, err := lim.Allow(r.Context(), user)
		if err != nil {
			// Only bad input gets here: the fallback store decides
			// through outages.
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if !d.Allowed {
			w.Header().Set("Retry-After", strconv.FormatInt(int64((d.RetryAfter+time.Second-1)/time.Second), 10))
			switch {
			case d.Degraded:
				// The guard fails closed: no orders until the store is back.
				http.Error(w, "orders paused: the limit store is unavailable", http.StatusServiceUnavailable)
			case d.Rule == limiter.GuardRule:
				http.Error(w, "daily order limit reached", http.StatusTooManyRequests)
			default:
				http.Error(w, "too many orders this minute", http.StatusTooManyRequests)
			}
			return
		}
		w.WriteHeader(http.StatusCreated)
		period := "this minute"
		if d.Rule == limiter.GuardRule {
			period = "today" // the guard is the closer limit
		}
		fmt.Fprintf(w, "order accepted (%d left %s)\n", d.Remaining, period)
	})
}

// openTimeout is how long the breaker stays open before probing the
// primary again; short, so the demo does not wait.
const openTimeout = 50 * time.Millisecond

func run(out io.Writer, primary backend.Store) error {
	sw := &switchable{Store: primary}
	store, err := fallback.New(sw,
		fallback.WithFailureThreshold(1),
		fallback.WithOpenTimeout(openTimeout),
		fallback.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		return err
	}
	start := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	fake := clock.NewFake(start)
	cfg := limiter.Config{
		Limit:     5,
		Window:    time.Minute,
		Prefix:    "payments:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":", // a fresh run each time
		OnFailure: backend.LocalPolicy(2),
		Guard:     &limiter.Guard{Limit: 12, Window: 24 * time.Hour, OnFailure: backend.FailClosed},
	}
	lim, err := limiter.New(store, cfg, limiter.WithClock(fake))
	if err != nil {
		return err
	}
	handler := orders(lim)
	order := func(user string) {
		req := httptest.NewRequest(http.MethodPost, "/orders", nil)
		req.Header.Set("X-User", user)
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		line := fmt.Sprintf("  %s %-5s %d %s", fake.Now().Format("15:04:05"), user, rec.Code, rec.Body.String())
		if ra := rec.Header().Get("Retry-After"); ra != "" {
			line = line[:len(line)-1] + " (Retry-After: " + ra + ")\n"
		}
		fmt.Fprint(out, line)
	}

	fmt.Fprintln(out, "Orders: 5 a minute per user (sliding log), 12 a day (guard, fails closed).")
	fmt.Fprintln(out, "\nann orders 6 times in a minute:")
	for range 6 {
		order("ann")
		fake.Advance(5 * time.Second)
	}
	fmt.Fprintln(out, "\nann keeps ordering, 2 a minute, until the daily guard stops her:")
	for range 5 {
		fake.Advance(time.Minute)
		order("ann")
		order("ann")
	}
	fmt.Fprintln(out, "\nThe store becomes unavailable; bob, who has ordered nothing today, tries:")
	sw.down.Store(true)
	order("bob")
	order("bob")
	fmt.Fprintln(out, "\nThe store is back:")
	sw.down.Store(false)
	time.Sleep(2 * openTimeout) // the breaker's wait runs on real time: then it probes
	order("bob")
	return nil
}

// openStore opens the store the example keeps its state in: a memory store
// when redisURL is empty, else the Redis at redisURL (any URL
// backend/storeurl reads: one server, a cluster, Sentinel) through the
// client library named, go-redis or rueidis. It returns where the state
// is, and a function that closes the store.
func openStore(redisURL, client string) (backend.Store, string, func(), error) {
	url, where := "memory://", "in memory"
	if redisURL != "" {
		url, where = redisURL, "in Redis ("+client+")"
	}
	opened, err := storeurl.Open(context.Background(), url, storeurl.WithClient(client))
	if err != nil {
		return nil, "", nil, err
	}
	return opened.Store, where, func() { _ = opened.Close() }, nil
}
