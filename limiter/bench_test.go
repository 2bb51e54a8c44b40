package limiter_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/limiter"
)

// BenchmarkAllow measures a whole call through the limiter (the system clock
// read included) on the memory store, over 10,000 keys.
func BenchmarkAllow(b *testing.B) {
	ids := make([]string, 10_000)
	for i := range ids {
		ids[i] = "user:" + strconv.Itoa(i)
	}
	for _, alg := range algorithms.Names() {
		b.Run(string(alg), func(b *testing.B) {
			store, _ := memorystore.New()
			lim, err := limiter.New(store, limiter.Config{Algorithm: alg, Limit: 100, Window: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			k := 0
			leases := (algorithms.Rule{Algorithm: alg}).HoldsLeases()
			for b.Loop() {
				if leases {
					// A lease's whole life: Acquire, then Release.
					lease, _, err := lim.Acquire(ctx, ids[k])
					if err == nil && lease != nil {
						err = lease.Release(ctx)
					}
					if err != nil {
						b.Fatal(err)
					}
				} else if _, err := lim.Allow(ctx, ids[k]); err != nil {
					b.Fatal(err)
				}
				if k++; k == len(ids) {
					k = 0
				}
			}
		})
	}
}

// BenchmarkAllowLists measures an exempt key (no store call), a key on no
// list of a limit with lists, and the same key without lists.
func BenchmarkAllowLists(b *testing.B) {
	lists := limiter.Config{Limit: 100, Window: time.Second,
		Exempt: []string{"ops", "10.0.0.0/8"}, Deny: []string{"mallory", "192.0.2.0/24"}}
	for _, c := range []struct {
		name string
		cfg  limiter.Config
		key  string
	}{
		{"exempt key", lists, "ops"},
		{"exempt address", lists, "10.1.2.3"},
		{"unlisted", lists, "user:1"},
		{"no lists", limiter.Config{Limit: 100, Window: time.Second}, "user:1"},
	} {
		b.Run(c.name, func(b *testing.B) {
			store, _ := memorystore.New()
			lim, err := limiter.New(store, c.cfg)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := lim.Allow(ctx, c.key); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCalls measures the other entrances on the memory store, over
// 10,000 keys with sliding_log at 100 a second (BenchmarkAllow's): AllowN,
// Peek, a limiter with a guard or a shadow limit, Admit, a Composite of
// two limits and Plans.
func BenchmarkCalls(b *testing.B) {
	ids := make([]string, 10_000)
	for i := range ids {
		ids[i] = "user:" + strconv.Itoa(i)
	}
	base := limiter.Config{Limit: 100, Window: time.Second, Prefix: "user:"}
	newLim := func(b *testing.B, store *memorystore.Store, cfg limiter.Config) *limiter.Limiter {
		lim, err := limiter.New(store, cfg)
		if err != nil {
			b.Fatal(err)
		}
		return lim
	}
	guarded := base
	guarded.Guard = &limiter.Guard{Limit: 1000, Window: time.Minute}
	shadowed := base
	shadowed.Guard = &limiter.Guard{Limit: 1000, Window: time.Minute, Mode: limiter.Shadow}
	type call func(ctx context.Context, key string) (limiter.Decision, error)
	for _, c := range []struct {
		name string
		make func(b *testing.B, store *memorystore.Store) call
	}{
		{"AllowN", func(b *testing.B, store *memorystore.Store) call {
			lim := newLim(b, store, base)
			return func(ctx context.Context, key string) (limiter.Decision, error) { return lim.AllowN(ctx, key, 2) }
		}},
		{"Peek", func(b *testing.B, store *memorystore.Store) call { return newLim(b, store, base).Peek }},
		{"guard", func(b *testing.B, store *memorystore.Store) call { return newLim(b, store, guarded).Allow }},
		{"shadow guard", func(b *testing.B, store *memorystore.Store) call { return newLim(b, store, shadowed).Allow }},
		{"Admit", func(b *testing.B, store *memorystore.Store) call {
			lim := newLim(b, store, base)
			return func(ctx context.Context, key string) (limiter.Decision, error) {
				keys := [1]string{key}
				_, d, err := lim.Admit(ctx, limiter.Request{Keys: keys[:]})
				return d, err
			}
		}},
		{"Composite.Allow", func(b *testing.B, store *memorystore.Store) call {
			comp, err := limiter.NewComposite(store, []limiter.Config{base,
				{Algorithm: algorithms.SlidingCounter, Limit: 1_000_000, Window: time.Second, Prefix: "global:"}})
			if err != nil {
				b.Fatal(err)
			}
			return func(ctx context.Context, key string) (limiter.Decision, error) { return comp.Allow(ctx, key, "all") }
		}},
		{"Plans.Allow", func(b *testing.B, store *memorystore.Store) call {
			free := base
			pro := base
			pro.Limit, pro.Prefix = 1000, "pro:"
			plans, err := limiter.NewPlans(map[string]*limiter.Limiter{"free": newLim(b, store, free), "pro": newLim(b, store, pro)},
				func(_ context.Context, key string) (string, error) {
					if len(key)%2 == 0 {
						return "pro", nil
					}
					return "free", nil
				})
			if err != nil {
				b.Fatal(err)
			}
			return func(ctx context.Context, key string) (limiter.Decision, error) {
				d, _, err := plans.Allow(ctx, key)
				return d, err
			}
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			store, _ := memorystore.New()
			do := c.make(b, store)
			ctx := context.Background()
			b.ReportAllocs()
			k := 0
			for b.Loop() {
				if _, err := do(ctx, ids[k]); err != nil {
					b.Fatal(err)
				}
				if k++; k == len(ids) {
					k = 0
				}
			}
		})
	}
}
