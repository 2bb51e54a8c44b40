package fallback_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/fallback"
)

// goroutineCounter wraps a primary that honours its context and counts,
// in each call, the goroutines alive beyond those before the benchmark: the
// goroutines a fallback decision costs while it waits for the primary.
type goroutineCounter struct {
	backend.Store
	base, extra int
}

func (g *goroutineCounter) HonoursContext() bool { return true }

func (g *goroutineCounter) Take(ctx context.Context, req backend.Request) (backend.Result, error) {
	g.extra += runtime.NumGoroutine() - g.base
	return g.Store.Take(ctx, req)
}

// admitAll is a primary that admits everything at no cost.
type admitAll struct{ backend.Store }

func (admitAll) Take(_ context.Context, req backend.Request) (backend.Result, error) {
	return backend.Result{Allowed: true, Limit: req.Rule.Limit, Remaining: req.Rule.Limit}, nil
}

// BenchmarkDecision measures one fallback decision over a healthy primary
// that honours its context: allocs/op, and goroutines/op, the goroutines
// alive during the primary call beyond the benchmark's own (one per call
// when fallback runs each call in a goroutine). "stub" is a primary that
// costs nothing; "goredis" a go-redis store (ContextTimeoutEnabled) on
// miniredis.
func BenchmarkDecision(b *testing.B) {
	rule := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 1 << 40, Window: time.Hour}
	mr := miniredis.RunT(b)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = c.Close() })
	gs, err := goredisstore.New(c, goredisstore.WithBatching(1))
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name    string
		primary backend.Store
	}{{"stub", admitAll{}}, {"goredis", gs}} {
		b.Run(bc.name, func(b *testing.B) {
			p := &goroutineCounter{Store: bc.primary}
			s, err := fallback.New(p)
			if err != nil {
				b.Fatal(err)
			}
			req := backend.Request{Key: backend.Key{Prefix: "b:", ID: "k"}, Rule: rule, Now: time.Now(), Cost: 1}
			ctx := context.Background()
			if _, err := s.Take(ctx, req); err != nil { // warm: scripts, connections
				b.Fatal(err)
			}
			p.base, p.extra = runtime.NumGoroutine(), 0
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := s.Take(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(p.extra)/float64(b.N), "goroutines/op")
		})
	}
}
