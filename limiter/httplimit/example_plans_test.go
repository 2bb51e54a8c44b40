package httplimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/httplimit"
)

// One middleware for every plan: each response describes the limit of the
// plan its key resolves to. (The policy name is one for all plans,
// WithPolicyName's; examples/plans mounts one middleware per plan to name
// each plan's policy.)
func ExampleNewPlans() {
	store, _ := memorystore.New()
	fake := clock.NewFake(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	free, _ := limiter.New(store, limiter.Config{Limit: 1, Window: time.Minute, Prefix: "api:free:"}, limiter.WithClock(fake))
	pro, _ := limiter.New(store, limiter.Config{Limit: 10, Window: time.Minute, Prefix: "api:pro:"}, limiter.WithClock(fake))
	plans, _ := limiter.NewPlans(map[string]*limiter.Limiter{"free": free, "pro": pro},
		func(_ context.Context, apiKey string) (string, error) {
			tier, _, _ := strings.Cut(apiKey, "-")
			return tier, nil
		})
	mw, err := httplimit.NewPlans(plans, httplimit.WithKey(httplimit.Header("X-API-Key")))
	if err != nil {
		fmt.Println(err)
		return
	}
	h := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, key := range []string{"free-ann", "free-ann", "pro-acme"} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("X-API-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(key, w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit"))
	}
	// Output:
	// free-ann 200 "default";q=1;w=60 "default";r=0
	// free-ann 429 "default";q=1;w=60 "default";r=0;t=60
	// pro-acme 200 "default";q=10;w=60 "default";r=9
}

// A per-client and a per-route limit, all or nothing: RateLimit-Policy
// lists both, RateLimit names the one the decision is about. The third
// request of 192.0.2.1, refused by its client limit, takes no route unit,
// so 192.0.2.2 gets the route's last one.
func ExampleNewComposite() {
	store, _ := memorystore.New()
	fake := clock.NewFake(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	c, _ := limiter.NewComposite(store, []limiter.Config{
		{Limit: 2, Window: time.Minute, Prefix: "client:"},
		{Limit: 3, Window: time.Minute, Prefix: "route:"},
	}, limiter.WithClock(fake))
	mux := http.NewServeMux()
	mw, err := httplimit.NewComposite(c, []httplimit.Limit{
		{Key: httplimit.ClientIP(), Policy: "per-client"},
		{Key: httplimit.Route(mux), Policy: "per-route"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	mux.HandleFunc("GET /search", func(http.ResponseWriter, *http.Request) {})
	h := mw.Handler(mux)
	for _, client := range []string{"192.0.2.1", "192.0.2.1", "192.0.2.1", "192.0.2.2", "192.0.2.3"} {
		r := httptest.NewRequest(http.MethodGet, "/search", nil)
		r.RemoteAddr = client + ":40000"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(client, w.Code, w.Header().Get("RateLimit"))
		if client == "192.0.2.3" {
			fmt.Println(w.Header().Get("RateLimit-Policy"))
		}
	}
	// Output:
	// 192.0.2.1 200 "per-client";r=1
	// 192.0.2.1 200 "per-client";r=0
	// 192.0.2.1 429 "per-client";r=0;t=60
	// 192.0.2.2 200 "per-route";r=0
	// 192.0.2.3 429 "per-route";r=0;t=60
	// "per-client";q=2;w=60, "per-route";q=3;w=60
}
