package memorystore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
)

// BenchmarkTake measures one decision on the store, for each algorithm, with
// one hot key and with 10,000 keys, serially and from all Ps. The limit is
// 100 per second and time advances 1 ms every 64 decisions: with 10,000 keys
// nearly every request is admitted, with one key nearly every one is denied.
func BenchmarkTake(b *testing.B) {
	for _, alg := range algorithms.Names() {
		rule := algorithms.Rule{Algorithm: alg, Limit: 100, Window: time.Second}
		for _, keys := range []int{1, 10_000} {
			ids := make([]string, keys)
			for i := range ids {
				ids[i] = "user:" + strconv.Itoa(i)
			}
			name := string(alg) + "/keys=" + strconv.Itoa(keys)
			b.Run(name+"/serial", func(b *testing.B) {
				s, _ := memorystore.New()
				ctx := context.Background()
				r := backend.Request{Key: backend.Key{Prefix: "bench:"}, Rule: rule, Now: t0, Cost: 1}
				b.ReportAllocs()
				i, k := 0, 0
				for b.Loop() {
					r.Key.ID = ids[k]
					if k++; k == keys {
						k = 0
					}
					if i&63 == 0 {
						r.Now = r.Now.Add(time.Millisecond)
					}
					i++
					if _, err := s.Take(ctx, r); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(name+"/parallel", func(b *testing.B) {
				s, _ := memorystore.New()
				ctx := context.Background()
				var clock atomic.Int64
				var worker atomic.Int64
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					i := 0
					k := int(worker.Add(1)*7919) % keys
					r := backend.Request{Key: backend.Key{Prefix: "bench:"}, Rule: rule, Now: t0, Cost: 1}
					for pb.Next() {
						r.Key.ID = ids[k]
						if k++; k == keys {
							k = 0
						}
						if i&63 == 0 {
							r.Now = t0.Add(time.Duration(clock.Add(1)) * time.Millisecond)
						}
						i++
						if _, err := s.Take(ctx, r); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

// BenchmarkTakeAll measures one TakeEach of three fixed-window limits (a
// rate limit service request of three descriptors) over 10,000 ids; its
// one allocation is the each it returns (TakeAll makes none).
func BenchmarkTakeAll(b *testing.B) {
	s, _ := memorystore.New()
	ctx := context.Background()
	rule := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 1 << 40, Window: time.Second}
	reqs := make([]backend.Request, 3)
	for i := range reqs {
		reqs[i] = backend.Request{Key: backend.Key{Prefix: "bench" + strconv.Itoa(i) + ":"}, Rule: rule, Now: t0, Cost: 1}
	}
	ids := make([]string, 10_000)
	for i := range ids {
		ids[i] = "user:" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	k := 0
	for b.Loop() {
		for i := range reqs {
			reqs[i].Key.ID = ids[k]
		}
		if k++; k == len(ids) {
			k = 0
		}
		res, each, err := s.TakeEach(ctx, reqs)
		if err != nil || len(each) != len(reqs) {
			b.Fatal(res, err)
		}
	}
}
