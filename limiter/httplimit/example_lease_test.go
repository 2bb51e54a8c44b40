package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/httplimit"
)

// Under a concurrency limit the middleware bounds requests in flight: a
// request holds a lease until its handler returns. Here a second upload
// arrives while the first one's handler is still running.
func ExampleNew_concurrency() {
	store, _ := memorystore.New()
	fake := clock.NewFake(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	uploads, _ := limiter.New(store, limiter.Config{Algorithm: "concurrency", Limit: 1, Window: 30 * time.Second,
		Prefix: "uploads:"}, limiter.WithClock(fake))
	mw, err := httplimit.New(uploads, httplimit.WithKey(httplimit.Header("X-User")), httplimit.WithPolicyName("uploads"))
	if err != nil {
		fmt.Println(err)
		return
	}
	var h http.Handler
	upload := func(name string) {
		r := httptest.NewRequest(http.MethodPost, "/upload", nil)
		r.Header.Set("X-User", "ann")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(name, w.Code, w.Header().Get("RateLimit"))
		if ra := w.Header().Get("Retry-After"); ra != "" {
			fmt.Println("  Retry-After:", ra) // when the first lease times out, at the latest
		}
	}
	nested := true
	h = mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		if nested {
			nested = false
			upload("second, while the first runs:")
		}
	}))
	upload("first:")
	upload("third, after both:")
	// Output:
	// second, while the first runs: 429 "uploads";r=0
	//   Retry-After: 30
	// first: 200 "uploads";r=0
	// third, after both: 200 "uploads";r=0
}
