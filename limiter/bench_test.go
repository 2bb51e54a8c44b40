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
			for b.Loop() {
				if _, err := lim.Allow(ctx, ids[k]); err != nil {
					b.Fatal(err)
				}
				if k++; k == len(ids) {
					k = 0
				}
			}
		})
	}
}
