package redisengine_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/backend/rueidisstore"
	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// BenchmarkFinancial measures, on one local master with one replica and 64
// callers, what the guard and replica acknowledgement cost against the
// plain sliding log, at steady state: per round every cell (client ×
// variant, in an order that moves by one each round) runs 1 s of warm-up
// (pools dialled, keys at their steady contents) and then 2 s measured;
// it logs the medians of 3 rounds and each variant's share of the plain
// log's rate within the same round.
//
//	go test -run x -bench Financial -benchtime 1x ./backend/internal/redisengine/
func BenchmarkFinancial(b *testing.B) {
	master := redistest.Start(b)
	redistest.StartReplica(b, master)
	main := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 100, Window: time.Second}
	guard := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: algorithms.MaxFixedWindowLimit, Window: 24 * time.Hour}
	const keys, callers, rounds = 10_000, 64, 3
	const warmup, measure = time.Second, 2 * time.Second
	type cell struct {
		client, variant string
		store           backend.Store
		guard           bool
		rates, shares   []float64
		unconfirmed     int64
	}
	var cells []*cell
	for _, client := range []string{"go-redis", "rueidis"} {
		for _, v := range []struct {
			name       string
			ack, guard bool
		}{{"plain", false, false}, {"guard", false, true}, {"ack", true, false}, {"ack+guard", true, true}} {
			var store backend.Store
			var err error
			if client == "go-redis" {
				c := redis.NewClient(&redis.Options{Addr: master.Addr(), PoolSize: callers})
				b.Cleanup(func() { _ = c.Close() })
				var opts []goredisstore.Option
				if v.ack {
					opts = append(opts, goredisstore.WithReplicaAck(1, 100*time.Millisecond, backend.DenyUnconfirmed))
				}
				store, err = goredisstore.New(c, opts...)
			} else {
				c, cerr := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{master.Addr()}, DisableCache: true})
				if cerr != nil {
					b.Fatal(cerr)
				}
				b.Cleanup(c.Close)
				var opts []rueidisstore.Option
				if v.ack {
					opts = append(opts, rueidisstore.WithReplicaAck(1, 100*time.Millisecond, backend.DenyUnconfirmed))
				}
				store, err = rueidisstore.New(c, opts...)
			}
			if err != nil {
				b.Fatal(err)
			}
			cells = append(cells, &cell{client: client, variant: v.name, store: store, guard: v.guard})
		}
	}
	// load runs callers against c for d and returns the decisions made.
	var next atomic.Int64
	load := func(c *cell, d time.Duration) int64 {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		var done, unconfirmed atomic.Int64
		var wg sync.WaitGroup
		for range callers {
			wg.Go(func() {
				for ctx.Err() == nil {
					id := fmt.Sprint("k", next.Add(1)%keys)
					req := backend.Request{Key: backend.Key{Prefix: "bench:" + c.client + ":", ID: id}, Rule: main, Now: time.Now(), Cost: 1}
					var res backend.Result
					var err error
					if c.guard {
						g := req
						g.Key.Prefix, g.Rule = "bench:guard:"+c.client+":", guard
						res, err = c.store.TakeAll(context.Background(), []backend.Request{req, g})
					} else {
						res, err = c.store.Take(context.Background(), req)
					}
					if err != nil {
						b.Error(err)
						return
					}
					if res.Unconfirmed {
						unconfirmed.Add(1)
					}
					done.Add(1)
				}
			})
		}
		wg.Wait()
		c.unconfirmed += unconfirmed.Load()
		return done.Load()
	}
	for range b.N {
		for r := range rounds {
			rate := map[*cell]float64{}
			for k := range cells {
				c := cells[(k+r)%len(cells)]
				load(c, warmup)
				start := time.Now()
				n := load(c, measure)
				rate[c] = float64(n) / time.Since(start).Seconds()
				c.rates = append(c.rates, rate[c])
			}
			for _, c := range cells {
				for _, p := range cells {
					if p.client == c.client && p.variant == "plain" {
						c.shares = append(c.shares, rate[c]/rate[p])
					}
				}
			}
		}
	}
	for _, c := range cells {
		b.Logf("%-9s %-10s %8.0f decisions/s (%3.0f%% of plain, range %.0f–%.0f%%), %d unconfirmed",
			c.client, c.variant, median(c.rates), 100*median(c.shares), 100*slices.Min(c.shares), 100*slices.Max(c.shares), c.unconfirmed)
	}
}
