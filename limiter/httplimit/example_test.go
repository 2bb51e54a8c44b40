package httplimit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/httplimit"
)

func Example() {
	store, _ := memorystore.New()
	fake := clock.NewFake(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	lim, _ := limiter.New(store, limiter.Config{Limit: 2, Window: time.Minute, Prefix: "api:"}, limiter.WithClock(fake))
	mw, err := httplimit.New(lim) // keyed by client IP
	if err != nil {
		panic(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "hello\n")
	}))

	for range 3 {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "192.0.2.1:51234"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit"))
		if ra := w.Header().Get("Retry-After"); ra != "" {
			fmt.Println("Retry-After:", ra)
		}
		fake.Advance(15 * time.Second)
	}
	// Output:
	// 200 "default";q=2;w=60 "default";r=1
	// 200 "default";q=2;w=60 "default";r=0
	// 429 "default";q=2;w=60 "default";r=0;t=30
	// Retry-After: 30
}

func ExampleProxiedClientIP() {
	// Behind a load balancer at 10.0.0.0/8 that appends to X-Forwarded-For.
	key, err := httplimit.ProxiedClientIP("X-Forwarded-For", "10.0.0.0/8")
	if err != nil {
		panic(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "10.0.0.2:40000"                                    // the load balancer
	r.Header.Set("X-Forwarded-For", "6.6.6.6, 198.51.100.7, 10.0.0.9") // the client wrote 6.6.6.6 itself
	fmt.Println(key(r).Value)

	r.RemoteAddr = "203.0.113.5:40000" // not through the load balancer: the header is ignored
	fmt.Println(key(r).Value)
	// Output:
	// 198.51.100.7
	// 203.0.113.5
}

func ExampleJoin() {
	mux := http.NewServeMux()
	key := httplimit.Join(httplimit.ClientIP(), httplimit.Route(mux))
	mux.HandleFunc("GET /items/{id}", func(http.ResponseWriter, *http.Request) {})

	r := httptest.NewRequest(http.MethodGet, "/items/42", nil)
	r.RemoteAddr = "192.0.2.1:51234"
	fmt.Println(key(r).Value)
	// Output:
	// 192.0.2.1|GET /items/{id}
}

func ExampleDecisionFrom() {
	store, _ := memorystore.New()
	lim, _ := limiter.New(store, limiter.Config{Limit: 3, Window: time.Minute, Prefix: "api:"})
	mw, _ := httplimit.New(lim)
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The handler after the middleware reads the decision, not the
		// response headers.
		if d, ok := httplimit.DecisionFrom(r.Context()); ok {
			fmt.Fprintf(w, "%d of %d left", d.Remaining, d.Limit)
		}
	}))
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "192.0.2.1:51234"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	fmt.Println(w.Body.String())
	// Output:
	// 2 of 3 left
}

// The limit's lists (limiter.Config.Exempt and Deny) are answered by the
// middleware: exempt clients pass, denied ones get 403.
func ExampleWithDenyListHandler() {
	store, _ := memorystore.New()
	lim, err := limiter.New(store, limiter.Config{Limit: 1, Window: time.Minute, Prefix: "api:",
		Exempt: []string{"10.0.0.0/8"},        // the monitoring network
		Deny:   []string{"198.51.100.66/32"}}) // an abuser
	if err != nil {
		panic(err)
	}
	mw, err := httplimit.New(lim, httplimit.WithDenyListHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusForbidden)
	})))
	if err != nil {
		panic(err)
	}
	h := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, peer := range []string{"10.1.2.3", "10.1.2.3", "192.0.2.1", "192.0.2.1", "198.51.100.66"} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = peer + ":40000"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(peer, w.Code)
	}
	_, err = limiter.New(store, limiter.Config{Limit: 1, Window: time.Minute, Exempt: []string{"203.0.113.0/24 "}})
	fmt.Println(err)
	// Output:
	// 10.1.2.3 200
	// 10.1.2.3 200
	// 192.0.2.1 200
	// 192.0.2.1 429
	// 198.51.100.66 403
	// limiter: exempt entry "203.0.113.0/24 ": has white space around it; remove it
}
