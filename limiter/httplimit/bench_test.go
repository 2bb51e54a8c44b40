package httplimit

import (
	"net/http"
	"testing"
	"time"

	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/limiter"
)

// discard is a ResponseWriter that keeps nothing, so the benchmarks measure
// the middleware rather than a recorder.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(int)             {}

// BenchmarkMiddleware: the cost per request of a bare handler, of the
// middleware for an exempt request (by address, by key), and for a limited
// one on the memory store (admitted, and denied with a problem+json body).
//
//	go test -run x -bench Middleware -benchmem ./limiter/httplimit/
func BenchmarkMiddleware(b *testing.B) {
	bare := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	newMW := func(b *testing.B, limit int64, exempt []string, opts ...Option) http.Handler {
		store, err := memorystore.New()
		if err != nil {
			b.Fatal(err)
		}
		lim, err := limiter.New(store, limiter.Config{Limit: limit, Window: time.Hour, Prefix: "b:", Exempt: exempt})
		if err != nil {
			b.Fatal(err)
		}
		mw, err := New(lim, opts...)
		if err != nil {
			b.Fatal(err)
		}
		return mw.Handler(bare)
	}
	run := func(b *testing.B, h http.Handler, r *http.Request) {
		w := &discard{h: http.Header{}}
		b.ReportAllocs()
		for b.Loop() {
			clear(w.h)
			h.ServeHTTP(w, r)
		}
	}
	b.Run("bare", func(b *testing.B) {
		run(b, bare, request("192.0.2.1:1"))
	})
	b.Run("exempt-addr", func(b *testing.B) {
		run(b, newMW(b, 10, []string{"192.0.2.0/24"}), request("192.0.2.1:1"))
	})
	b.Run("exempt-key", func(b *testing.B) {
		run(b, newMW(b, 10, []string{"monitor"}, WithKey(Header("X-Api-Key"))), request("192.0.2.1:1", "X-Api-Key", "monitor"))
	})
	b.Run("limited-admitted", func(b *testing.B) {
		// A fixed window with an unreachable limit: every request is
		// admitted and counted.
		store, _ := memorystore.New()
		lim, _ := limiter.New(store, limiter.Config{Algorithm: "fixed_window", Limit: 1 << 40, Window: time.Hour, Prefix: "b:"})
		mw, _ := New(lim)
		run(b, mw.Handler(bare), request("192.0.2.1:1"))
	})
	b.Run("limited-denied-json", func(b *testing.B) {
		h := newMW(b, 1, nil)
		h.ServeHTTP(&discard{h: http.Header{}}, request("192.0.2.1:1"))
		run(b, h, request("192.0.2.1:1", "Accept", "application/json"))
	})
}
