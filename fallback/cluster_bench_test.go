package fallback_test

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/backend/rueidisstore"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/internal/dev/scripttest"
)

// BenchmarkClusterTake compares Takes on a 3-master cluster with Takes on
// one node, through each client, from 64 goroutines over 3,000 keys (a
// sliding log of 100 a minute: every Take admits at 40,000 decisions), with
// the stores' defaults (batching, per master on the cluster). It reports decisions/s and the servers' CPU per decision
// (all nodes summed, from /proc: Linux only, 10 ms ticks, so run enough
// decisions):
//
//	go test -run '^$' -bench BenchmarkClusterTake -benchtime 40000x ./fallback
//
// For figures at steady state, see BenchmarkServerCPU in
// backend/internal/redisengine.
func BenchmarkClusterTake(b *testing.B) {
	rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 100, Window: time.Minute}
	for _, client := range []string{"goredis", "rueidis"} {
		for _, topo := range []string{"single", "cluster"} {
			b.Run(client+"/"+topo, func(b *testing.B) {
				var nodes []*redistest.Server
				var addrs []string
				if topo == "single" {
					srv := redistest.Start(b)
					nodes, addrs = []*redistest.Server{srv}, []string{srv.Addr()}
				} else {
					c := redistest.StartCluster(b, 3, 0)
					nodes, addrs = c.Masters, c.Addrs()
				}
				store := benchStore(b, client, topo == "cluster", addrs)
				keys := make([]backend.Key, nodeKeys)
				prefix := fmt.Sprintf("bench:%d:", time.Now().UnixNano())
				for i := range keys {
					keys[i] = backend.Key{Prefix: prefix, ID: "k" + strconv.Itoa(i)}
				}
				cpu0, calls0 := serversCPU(b, nodes), evalshaCalls(b, nodes)
				var next atomic.Int64
				b.SetParallelism(max(1, nodeCallers/runtime.GOMAXPROCS(0)))
				b.ResetTimer()
				start := time.Now()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						k := keys[next.Add(1)%int64(len(keys))]
						if _, err := store.Take(b.Context(), backend.Request{Key: k, Rule: rule, Now: time.Now(), Cost: 1}); err != nil {
							b.Error(err)
							return
						}
					}
				})
				elapsed := time.Since(start)
				b.StopTimer()
				cpu := serversCPU(b, nodes) - cpu0
				calls := evalshaCalls(b, nodes) - calls0
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
				b.ReportMetric(float64(calls)/float64(b.N), "evalsha/decision")
				b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "server-µs/decision")
			})
		}
	}
}

// benchStore is a store of the named client over addrs.
func benchStore(b *testing.B, client string, cluster bool, addrs []string) backend.Store {
	switch client {
	case "goredis":
		var c redis.UniversalClient
		if cluster {
			c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, PoolSize: 2 * nodeCallers})
		} else {
			c = redis.NewClient(&redis.Options{Addr: addrs[0], PoolSize: 2 * nodeCallers})
		}
		b.Cleanup(func() { _ = c.Close() })
		s, err := goredisstore.New(c)
		require.NoError(b, err)
		return s
	default:
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
		require.NoError(b, err)
		b.Cleanup(c.Close)
		s, err := rueidisstore.New(c)
		require.NoError(b, err)
		return s
	}
}

// evalshaCalls sums the EVALSHA calls the servers ran.
func evalshaCalls(b *testing.B, nodes []*redistest.Server) int {
	n := 0
	for _, s := range nodes {
		n += scripttest.CommandCalls(b, s, "evalsha")
	}
	return n
}

// serversCPU sums the user and system CPU time of the servers' processes.
func serversCPU(b *testing.B, nodes []*redistest.Server) time.Duration {
	var total time.Duration
	for _, n := range nodes {
		raw, err := os.ReadFile("/proc/" + strconv.Itoa(n.PID()) + "/stat")
		if err != nil {
			b.Skipf("server CPU: %v", err)
		}
		// Fields after "pid (comm)": state is the first, utime the 12th,
		// stime the 13th, in USER_HZ ticks (100 per second on Linux).
		f := bytes.Fields(raw[bytes.LastIndexByte(raw, ')')+1:])
		utime, _ := strconv.ParseInt(string(f[11]), 10, 64)
		stime, _ := strconv.ParseInt(string(f[12]), 10, 64)
		total += time.Duration(utime+stime) * 10 * time.Millisecond
	}
	return total
}
