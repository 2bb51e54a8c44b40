// Command httpserver serves a page behind a per-IP crawler limit: 100
// requests per 60 s for each client address (each /64 network for IPv6).
//
//	go run ./examples/httpserver
//	go run ./examples/httpserver -redis redis://127.0.0.1:6379/0 [-client rueidis]
//	go run ./examples/httpserver -trusted-proxies 10.0.0.0/8,192.0.2.7
//	go run ./examples/httpserver -exempt 192.0.2.0/24 -deny 198.51.100.66
//
// It listens on -addr (default 127.0.0.1:8080). Every response to / carries
// the RateLimit-Policy and RateLimit headers (and the X-RateLimit-* trio);
// the 101st request within a minute gets 429 Too Many Requests with
// Retry-After, and a problem+json body when the client accepts JSON. The
// page reads the decision from the request's context. Clients in -exempt
// are never limited, those in -deny always refused (403). /metrics serves
// Prometheus metrics and is not limited.
//
// By default the counts are in memory. With -redis they are in Redis, shared
// by every instance, behind a fallback store: if Redis goes down, each
// instance keeps limiting on its own. Forwarding headers (X-Forwarded-For)
// are ignored unless the peer is one of -trusted-proxies.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/observe"
	"github.com/limitkit/limitkit/backend/observe/promobserve"
	"github.com/limitkit/limitkit/backend/storeurl"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/fallback"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/httplimit"
)

// The crawler limit.
const (
	limit  = 100
	window = 60 * time.Second
	prefix = "crawl:"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	redisURL := flag.String("redis", "", "Redis URL (redis://host:port/db); empty keeps the counts in memory")
	client := flag.String("client", "go-redis", "Redis client library: go-redis or rueidis")
	trusted := flag.String("trusted-proxies", "", "comma-separated addresses or CIDR networks of reverse proxies whose X-Forwarded-For is believed; empty trusts none")
	exempt := flag.String("exempt", "", "comma-separated client addresses or CIDR networks that are never limited")
	deny := flag.String("deny", "", "comma-separated client addresses or CIDR networks that are always refused")
	flag.Parse()

	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	handler, closeApp, err := newApp(config{RedisURL: *redisURL, Client: *client, TrustedProxies: *trusted, Exempt: *exempt, Deny: *deny, Logger: logger})
	if err != nil {
		fmt.Fprintln(os.Stderr, "httpserver:", err)
		os.Exit(1)
	}
	defer closeApp()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv := &http.Server{Addr: *addr, Handler: handler, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	logger.Info("httpserver: listening", "addr", "http://"+*addr, "limit", fmt.Sprintf("%d per %v per client IP", limit, window))
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "httpserver:", err)
		os.Exit(1)
	}
}

// config is what newApp needs; the zero value serves from memory with the
// system clock and trusts no proxy.
type config struct {
	// RedisURL keeps the counts in Redis when set, through Client
	// ("go-redis" or "rueidis").
	RedisURL, Client string
	// TrustedProxies is a comma-separated list of proxy addresses or
	// networks whose X-Forwarded-For is believed.
	TrustedProxies string
	// Exempt and Deny are comma-separated client addresses or networks
	// never limited and always refused.
	Exempt, Deny string
	// Clock is the limiter's clock (default: the system clock); tests pass
	// a fake one.
	Clock clock.Clock
	// Logger receives store failures and breaker changes (default
	// slog.Default()).
	Logger *slog.Logger
}

// newApp builds the server's handler, and a function that releases what it
// opened (the Redis client).
func newApp(cfg config) (http.Handler, func(), error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	reg := prometheus.NewRegistry()
	metrics, err := promobserve.New(reg)
	if err != nil {
		return nil, nil, err
	}
	store, closeStore, err := openStore(cfg, metrics)
	if err != nil {
		return nil, nil, err
	}
	var opts []limiter.Option
	if cfg.Clock != nil {
		opts = append(opts, limiter.WithClock(cfg.Clock))
	}
	// The address lists match the client address the key func finds,
	// behind proxies too.
	limCfg := limiter.Config{Limit: limit, Window: window, Prefix: prefix}
	if cfg.Exempt != "" {
		limCfg.Exempt = strings.Split(cfg.Exempt, ",")
	}
	if cfg.Deny != "" {
		limCfg.Deny = strings.Split(cfg.Deny, ",")
	}
	lim, err := limiter.New(observe.Wrap(store, metrics.Observer()), limCfg, opts...)
	if err != nil {
		closeStore()
		return nil, nil, err
	}
	key := httplimit.ClientIP()
	if cfg.TrustedProxies != "" {
		key, err = httplimit.ProxiedClientIP("X-Forwarded-For", strings.Split(cfg.TrustedProxies, ",")...)
		if err != nil {
			closeStore()
			return nil, nil, fmt.Errorf("-trusted-proxies: %w", err)
		}
	}
	// An IPv6 subscriber usually holds a whole /64: limit the network, or
	// the client could cycle through its addresses.
	key, err = httplimit.IPv6Prefix(64, key)
	if err != nil {
		closeStore()
		return nil, nil, err
	}
	mwOpts := []httplimit.Option{
		httplimit.WithKey(key),
		httplimit.WithPolicyName("crawl"),
		httplimit.WithHeaders(httplimit.DraftHeaders | httplimit.XRateLimitHeaders),
		httplimit.WithLogger(cfg.Logger),
	}
	mw, err := httplimit.New(lim, mwOpts...)
	if err != nil {
		closeStore()
		return nil, nil, err
	}

	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("GET /", mw.Handler(http.HandlerFunc(page)))
	return mux, closeStore, nil
}

// openStore returns the store the limit is kept in: memory, or Redis behind
// a fallback store that limits locally while Redis is down.
func openStore(cfg config, metrics *promobserve.Metrics) (backend.Store, func(), error) {
	if cfg.RedisURL == "" {
		mem, err := memorystore.New()
		if err != nil {
			return nil, nil, err
		}
		if err := metrics.WatchMemoryStore("memory", mem); err != nil {
			return nil, nil, err
		}
		return mem, func() {}, nil
	}
	client := cfg.Client
	if client == "" {
		client = "go-redis"
	}
	redisStore, closeRedis, err := openRedis(cfg.RedisURL, client)
	if err != nil {
		return nil, nil, fmt.Errorf("-redis %s: %w", cfg.RedisURL, err)
	}
	guard, err := fallback.New(redisStore,
		fallback.WithName("redis"),
		fallback.WithLogger(cfg.Logger),
		fallback.WithStateHook(metrics.BreakerHook("redis")))
	if err != nil {
		closeRedis()
		return nil, nil, err
	}
	return guard, closeRedis, nil
}

// page is what the crawler is after. It reads the limiter's decision from
// the request's context, where the middleware put it.
func page(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "Hello, crawler. "+remaining(r)+"\n")
}

func remaining(r *http.Request) string {
	d, ok := httplimit.DecisionFrom(r.Context())
	if !ok {
		return "You are not limited here (exempt, or the limit could not be checked)."
	}
	return strconv.FormatInt(d.Remaining, 10) + " requests left in this window."
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
