package denycache_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/denycache"
	"github.com/limitkit/limitkit/backend/memorystore"
)

// BenchmarkCachedDenial is the cost of a denial answered from the cache
// over the memory store (no network): the part of a decision the cache
// itself adds. BenchmarkStoreDenial is the same denial asked of the store.
func BenchmarkCachedDenial(b *testing.B) { benchDenial(b, true) }

func BenchmarkStoreDenial(b *testing.B) { benchDenial(b, false) }

func benchDenial(b *testing.B, cached bool) {
	mem, err := memorystore.New()
	if err != nil {
		b.Fatal(err)
	}
	var st backend.Store = mem
	var cache *denycache.Store
	if cached {
		if cache, err = denycache.New(mem, nil); err != nil {
			b.Fatal(err)
		}
		st = cache
	}
	rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 1, Window: time.Hour}
	now := time.Now()
	reqs := make([]backend.Request, 64)
	for i := range reqs {
		reqs[i] = backend.Request{Key: backend.Key{Prefix: "bench:", ID: "k" + strconv.Itoa(i)}, Rule: rule, Now: now, Cost: 1}
		for range 2 {
			if _, err := st.Take(b.Context(), reqs[i]); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ResetTimer()
	i := 0
	for b.Loop() {
		d, err := st.Take(b.Context(), reqs[i%len(reqs)])
		if err != nil || d.Allowed || d.Cached != cached {
			b.Fatalf("unexpected decision %+v, %v", d, err)
		}
		i++
	}
}
