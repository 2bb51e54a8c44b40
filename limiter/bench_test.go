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
