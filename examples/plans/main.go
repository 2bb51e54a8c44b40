// Command plans serves an API with two tiers in one HTTP server: free API
// keys get 3 requests a minute, pro keys 10, each key counted on its own.
//
//	go run ./examples/plans                       # a scripted demo, then exit
//	go run ./examples/plans -redis redis://127.0.0.1:6379/0 [-client rueidis]
//	go run ./examples/plans -addr 127.0.0.1:8080  # serve until interrupted
//
// A limiter.Plans holds one limiter per plan, each under its own key
// prefix, so counts stay per key and plan. Its resolver looks the caller's
// API key (the X-API-Key header) up in the key table, as a service would in
// its database; an unknown key gets 401 before any limit is spent. Each
// plan has its own httplimit middleware, so responses carry that plan's
// policy (RateLimit-Policy: "pro";q=10;w=60).
//
// The demo runs the server on a loopback port and sends it requests with a
// simulated clock, so it prints the same thing every time.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/storeurl"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/httplimit"
)

func main() {
	redisURL := flag.String("redis", "", "Redis URL (redis://host:port/db; rediss://, redis+cluster://, redis+sentinel:// as backend/storeurl reads them); empty keeps the state in memory")
	client := flag.String("client", "go-redis", "Redis client library: go-redis or rueidis")
	addr := flag.String("addr", "", "serve on this address until interrupted; empty runs the demo")
	flag.Parse()
	store, where, closeStore, err := openStore(*redisURL, *client)
	if err == nil {
		defer closeStore()
		if *addr == "" {
			err = run(os.Stdout, store, where)
		} else {
			err = serve(*addr, store)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "plans:", err)
		os.Exit(1)
	}
}

// apiKeys is the key table: which plan each API key is on.
var apiKeys = map[string]string{
	"key-free-alice": "free",
	"key-free-bob":   "free",
	"key-pro-acme":   "pro",
}

// planLimits are the plans' limits, each under its own prefix.
var planLimits = map[string]limiter.Config{
	"free": {Limit: 3, Window: time.Minute, Prefix: "api:free:"},
	"pro":  {Limit: 10, Window: time.Minute, Prefix: "api:pro:"},
}

// errUnknownKey is the resolver's answer for a key not in the table.
var errUnknownKey = errors.New("unknown API key")

// newHandler returns the API behind the plans' limits, and the plans.
func newHandler(store backend.Store, opts ...limiter.Option) (http.Handler, *limiter.Plans, error) {
	lims := map[string]*limiter.Limiter{}
	mws := map[string]*httplimit.Middleware{}
	key := httplimit.Header("X-API-Key")
	for name, cfg := range planLimits {
		lim, err := limiter.New(store, cfg, opts...)
		if err != nil {
			return nil, nil, err
		}
		mw, err := httplimit.New(lim, httplimit.WithKey(key), httplimit.WithPolicyName(name))
		if err != nil {
			return nil, nil, err
		}
		lims[name], mws[name] = lim, mw
	}
	plans, err := limiter.NewPlans(lims, func(_ context.Context, apiKey string) (string, error) {
		if plan, ok := apiKeys[apiKey]; ok {
			return plan, nil
		}
		return "", errUnknownKey
	})
	if err != nil {
		return nil, nil, err
	}
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, _ := httplimit.DecisionFrom(r.Context())
		fmt.Fprintf(w, "hello; %d left this minute\n", d.Remaining)
	})
	// One handler per plan, made once: the plan's middleware around api.
	handlers := map[string]http.Handler{}
	for name, mw := range mws {
		handlers[name] = mw.Handler(api)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		plan, _, err := plans.Resolve(r.Context(), r.Header.Get("X-API-Key"))
		if err != nil {
			// An unknown key, or a plan the table names that the
			// server does not have (limiter.ErrUnknownPlan): refuse,
			// spending no limit.
			http.Error(w, "401 unauthorized: "+err.Error(), http.StatusUnauthorized)
			return
		}
		handlers[plan].ServeHTTP(w, r)
	}), plans, nil
}

// run serves the API on a loopback port and prints what a few callers get.
func run(out io.Writer, store backend.Store, where string) error {
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	h, plans, err := newHandler(store, limiter.WithClock(fake))
	if err != nil {
		return err
	}
	// The demo starts from full allowances, even in a Redis it ran on
	// before.
	for apiKey, plan := range apiKeys {
		lim, err := plans.Plan(plan)
		if err == nil {
			err = lim.Reset(context.Background(), apiKey)
		}
		if err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	fmt.Fprintf(out, "counts %s; free: 3 a minute, pro: 10 a minute\n", where)
	url := "http://" + ln.Addr().String() + "/"
	call := func(apiKey string) error {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		req.Header.Set("X-API-Key", apiKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		fmt.Fprintf(out, "%-15s %d  %-22s %s\n", apiKey, resp.StatusCode,
			resp.Header.Get("RateLimit-Policy"), resp.Header.Get("RateLimit"))
		return nil
	}
	for _, k := range []string{"key-free-alice", "key-free-alice", "key-free-alice", "key-free-alice",
		"key-free-bob", "key-pro-acme", "key-pro-acme", "key-pro-acme", "key-pro-acme", "key-stolen"} {
		if err := call(k); err != nil {
			return err
		}
	}
	fake.Advance(time.Minute)
	fmt.Fprintln(out, "a minute later:")
	return call("key-free-alice")
}

// serve serves the API on addr until interrupted.
func serve(addr string, store backend.Store) error {
	h, _, err := newHandler(store)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	fmt.Printf("serving on http://%s/ (X-API-Key: key-free-alice, key-pro-acme)\n", addr)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
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
