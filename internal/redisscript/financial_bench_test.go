package redisscript_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/backend/rueidisstore"
	"github.com/limitkit/limitkit/internal/testing/redistest"
)

// BenchmarkFinancial measures, on one local master with one replica and 64
// callers, what the guard and replica acknowledgement cost against the
// plain sliding log: go test -run x -bench Financial ./internal/redisscript/
func BenchmarkFinancial(b *testing.B) {
	master := redistest.Start(b)
	redistest.StartReplica(b, master)
	main := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 100, Window: time.Second}
	guard := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: algorithms.MaxLimit, Window: 24 * time.Hour}
	const keys = 10_000
	type variant struct {
		name  string
		ack   bool
		guard bool
	}
	variants := []variant{{"plain", false, false}, {"guard", false, true}, {"ack", true, false}, {"ack+guard", true, true}}
	for _, client := range []string{"go-redis", "rueidis"} {
		for _, v := range variants {
			b.Run(client+"/"+v.name, func(b *testing.B) {
				var store backend.Store
				switch client {
				case "go-redis":
					c := redis.NewClient(&redis.Options{Addr: master.Addr(), PoolSize: 64})
					b.Cleanup(func() { _ = c.Close() })
					var opts []goredisstore.Option
					if v.ack {
						opts = append(opts, goredisstore.WithReplicaAck(1, 100*time.Millisecond, backend.DenyUnconfirmed))
					}
					store, _ = goredisstore.New(c, opts...)
				default:
					c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{master.Addr()}, DisableCache: true})
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(c.Close)
					var opts []rueidisstore.Option
					if v.ack {
						opts = append(opts, rueidisstore.WithReplicaAck(1, 100*time.Millisecond, backend.DenyUnconfirmed))
					}
					store, _ = rueidisstore.New(c, opts...)
				}
				var next, unconfirmed atomic.Int64
				b.SetParallelism(32) // 64 callers on 2 CPUs
				b.ResetTimer()
				start := time.Now()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						id := fmt.Sprint("k", next.Add(1)%keys)
						req := backend.Request{Key: backend.Key{Prefix: "bench:", ID: id}, Rule: main, Now: time.Now(), Cost: 1}
						var res backend.Result
						var err error
						if v.guard {
							g := req
							g.Key.Prefix, g.Rule = "bench:guard:", guard
							res, err = store.TakeAll(b.Context(), []backend.Request{req, g})
						} else {
							res, err = store.Take(b.Context(), req)
						}
						if err != nil {
							b.Error(err)
							return
						}
						if res.Unconfirmed {
							unconfirmed.Add(1)
						}
					}
				})
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
				// A replica starved of CPU can miss the 100 ms wait now and then.
				b.ReportMetric(float64(unconfirmed.Load()), "unconfirmed")
			})
		}
	}
}
