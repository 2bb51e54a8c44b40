package config_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/config"
)

// A policy's http block configures the middleware Set.HTTP builds for
// it: here requests are keyed by their API key header, and answers carry
// the draft's fields and the older X-RateLimit ones.
func ExampleSet_HTTP() {
	cfg, err := config.Parse([]byte(`
backend: {url: memory://}
policies:
  api:
    limit: 2
    window: 1m
    http:
      key: header:X-API-Key    # or ip, proxied_ip, route, query:NAME; a list is the first found
      headers: both            # draft (default), x_ratelimit, both, none
      policy_name: public-api  # default: the policy's name
`), config.YAML)
	if err != nil {
		fmt.Println(err)
		return
	}
	fake := clock.NewFake(time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC))
	set, err := cfg.Build(context.Background(), config.WithLimiterOptions(limiter.WithClock(fake)))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer set.Close()
	mw, err := set.HTTP("api")
	if err != nil {
		fmt.Println(err)
		return
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "items") }))

	send := func(apiKey string) {
		r := httptest.NewRequest(http.MethodGet, "/items", nil)
		if apiKey != "" {
			r.Header.Set("X-API-Key", apiKey)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%-5s %d %s | X-RateLimit-Remaining: %s\n", apiKey, w.Code, w.Header().Get("RateLimit"), w.Header().Get("X-RateLimit-Remaining"))
	}
	send("k-1")
	send("k-1")
	send("k-1")
	send("k-2")
	send("") // no key: 400, not a free pass
	// Output:
	// k-1   200 "public-api";r=1 | X-RateLimit-Remaining: 1
	// k-1   200 "public-api";r=0 | X-RateLimit-Remaining: 0
	// k-1   429 "public-api";r=0;t=60 | X-RateLimit-Remaining: 0
	// k-2   200 "public-api";r=1 | X-RateLimit-Remaining: 1
	//       400  | X-RateLimit-Remaining:
}
