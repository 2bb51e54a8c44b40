package redisengine_test

import (
	"fmt"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/backend/rueidisstore"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// BenchmarkLogs compares the sorted-set log with the compact log and the
// two-level limiter (and GCRA, for scale) on one redis-server, through the
// rueidis and go-redis stores, with 64 concurrent callers at the real
// time, reporting decisions/s:
//
//   - keys=10000/L=100/min: nearly every request admitted into a short log
//     (scripttest.BenchmarkTake's workload);
//   - keys=100/L=100/s and keys=100/L=1000/s: 100 busy keys whose logs
//     stay full (L=100: most requests denied) or hold hundreds of entries
//     (L=1000: most admitted).
//
// go test -run x -bench Logs -count 3 ./backend/internal/redisengine/
func BenchmarkLogs(b *testing.B) {
	srv := redistest.Start(b)
	all := benchStores(b, srv)
	type load struct {
		name   string
		keys   int
		limit  int64
		window time.Duration
	}
	loads := []load{
		{"keys=10000/L=100/min", 10_000, 100, time.Minute},
		{"keys=100/L=100/s", 100, 100, time.Second},
		{"keys=100/L=1000/s", 100, 1000, time.Second},
	}
	for _, ld := range loads {
		for _, client := range []string{"rueidis", "go-redis"} {
			store := all[client]
			for _, alg := range []algorithms.Name{algorithms.SlidingLog, algorithms.CompactLog, algorithms.TwoLevel, algorithms.GCRA} {
				b.Run(ld.name+"/"+client+"/"+string(alg), func(b *testing.B) {
					rule := algorithms.Rule{Algorithm: alg, Limit: ld.limit, Window: ld.window}
					prefix := fmt.Sprintf("benchlogs:%d:", time.Now().UnixNano())
					var failed, admitted atomic.Int64
					b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
					b.ResetTimer()
					start := time.Now()
					b.RunParallel(func(pb *testing.PB) {
						rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
						req := backend.Request{Key: backend.Key{Prefix: prefix}, Rule: rule, Cost: 1}
						for pb.Next() {
							req.Key.ID = strconv.Itoa(rng.IntN(ld.keys))
							req.Now = time.Now()
							res, err := store.Take(b.Context(), req)
							if err != nil {
								failed.Add(1)
							} else if res.Allowed {
								admitted.Add(1)
							}
						}
					})
					b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
					b.ReportMetric(float64(admitted.Load())/float64(b.N), "admitted/op")
					if n := failed.Load(); n > 0 {
						b.Fatalf("%d of %d Takes failed", n, b.N)
					}
				})
			}
		}
	}
}

// benchStores returns a store of each client library over srv.
func benchStores(b *testing.B, srv *redistest.Server) map[string]backend.Store {
	gc := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 64})
	b.Cleanup(func() { _ = gc.Close() })
	gs, err := goredisstore.New(gc)
	require.NoError(b, err)
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	require.NoError(b, err)
	b.Cleanup(rc.Close)
	rs, err := rueidisstore.New(rc)
	require.NoError(b, err)
	return map[string]backend.Store{"go-redis": gs, "rueidis": rs}
}

// BenchmarkScriptSteps measures the logs' and counters' steps inside
// redis-server, free of clients and networks: one EVAL runs the
// algorithm's step 20,000 times on a key whose log is full at limit L (one
// entry per ms; every step slides one out and one in) and times itself
// with TIME. It reports server µs per step.
//
// go test -run x -bench ScriptSteps -benchtime 1x ./backend/internal/redisengine/
func BenchmarkScriptSteps(b *testing.B) {
	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	b.Cleanup(func() { _ = c.Close() })
	const steps = 20_000
	loop := `
local l, n = tonumber(ARGV[1]), tonumber(ARGV[2])
local t0 = 1767225600000
for i = 0, l - 1 do step(KEYS[1], t0 + i, l, l, 1, true, false, 0) end
local a = redis.call('TIME')
for i = 0, n - 1 do step(KEYS[1], t0 + l + i, l, l, 1, true, false, 0) end
local b = redis.call('TIME')
return (tonumber(b[1]) - tonumber(a[1])) * 1000000 + tonumber(b[2]) - tonumber(a[2])
`
	for _, l := range []int{10, 100, 1000, 10_000} {
		for _, alg := range algorithms.Names() {
			b.Run(fmt.Sprintf("L=%d/%s", l, alg), func(b *testing.B) {
				src, err := rediswire.Script(alg)
				require.NoError(b, err)
				// The single-request script ends with single.lua: replace
				// it with the loop.
				i := strings.Index(src, "-- One request: KEYS[1]")
				require.Positive(b, i)
				var us int64
				for k := 0; b.Loop(); k++ {
					us, err = c.Eval(b.Context(), src[:i]+loop, []string{fmt.Sprintf("steps:%s:%d:%d:%d", alg, l, k, time.Now().UnixNano())},
						l, steps).Int64()
					require.NoError(b, err)
				}
				b.ReportMetric(float64(us)/steps, "server-µs/step")
			})
		}
	}
}
