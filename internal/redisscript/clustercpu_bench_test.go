package redisscript_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
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
	"github.com/limitkit/limitkit/internal/redisscript"
	"github.com/limitkit/limitkit/internal/testing/redistest"
)

// BenchmarkServerCPU measures the Redis servers' CPU per decision on one
// node and on a 3-master cluster, both clients, at steady state: 64
// callers over 3,000 keys (a never-denying sliding log), each cell a new
// client whose pool is dialled, 1 s of warm-up, 2 s measured; the cells of
// a round interleave single node and cluster, and figures are medians of 3
// rounds. Server CPU is used_cpu_sys + used_cpu_user (INFO cpu) summed over
// the masters; script calls and their time come from INFO commandstats.
// From the batched cell (b16) and the unbatched one (b1) of a topology it
// splits CPU per decision into a cost per take and a cost per script call
// (cpu = take + call × calls per decision, per round); script-µs is the
// time commandstats counts inside EVALSHA (wall time: it grows when the
// server is descheduled). Cells "inflightN"
// keep at most N batches in flight per cluster node; "cluster1" sends only
// keys of one master, so that one server is busy, as on a single node, but
// in cluster mode. It ignores b.N:
//
//	go test -run '^$' -bench BenchmarkServerCPU -benchtime 1x -v ./internal/redisscript/
func BenchmarkServerCPU(b *testing.B) {
	const rounds, callers, nkeys = 3, 64, 3000
	warm, measure := time.Second, 2*time.Second
	single := redistest.Start(b)
	cluster := redistest.StartCluster(b, 3, 0)
	type cell struct {
		topo     string // "single", "cluster", or "cluster1": keys of one master only
		batch    int
		inFlight int // per cluster node; 0 the default
	}
	cells := []cell{
		{"single", 16, 0}, {"cluster", 16, 0}, {"cluster", 16, 1}, {"cluster", 16, 4}, {"cluster1", 16, 0},
		{"single", 1, 0}, {"cluster", 1, 0},
	}
	name := func(c cell) string {
		n := fmt.Sprintf("%s/b%d", c.topo, c.batch)
		if c.inFlight > 0 {
			n += "/inflight" + strconv.Itoa(c.inFlight)
		}
		return n
	}
	rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 10_000, Window: time.Minute}
	type figures struct{ dps, cpu, sys, calls, script float64 }
	for _, client := range []string{"goredis", "rueidis"} {
		got := map[string][]figures{}
		for round := range rounds {
			order := slices.Clone(cells)
			// Rotate the order each round.
			order = append(order[round%len(order):], order[:round%len(order)]...)
			for _, c := range order {
				nodes := []*redistest.Server{single}
				addrs := []string{single.Addr()}
				if c.topo != "single" {
					nodes, addrs = cluster.Masters, cluster.Addrs()
				}
				undo := func() {}
				if c.inFlight > 0 {
					// Node batchers are made on first use: in the warm-up.
					undo = redisscript.SetNodeBatchesInFlight(c.inFlight)
				}
				store, closeStore := cpuStore(b, client, c.topo != "single", addrs, c.batch)
				keys := make([]backend.Key, 0, nkeys)
				prefix := fmt.Sprintf("cpu:%d:", time.Now().UnixNano())
				for i := 0; len(keys) < nkeys; i++ {
					k := backend.Key{Prefix: prefix, ID: "k" + strconv.Itoa(i)}
					if c.topo == "cluster1" && cluster.MasterOf(redistest.KeySlot(redisscript.Key(k, rule))) != cluster.Masters[0] {
						continue
					}
					keys = append(keys, k)
				}
				var decisions atomic.Int64
				load := func(d time.Duration) {
					var next atomic.Int64
					end := time.Now().Add(d)
					var wg sync.WaitGroup
					for range callers {
						wg.Go(func() {
							for time.Now().Before(end) {
								k := keys[next.Add(1)%nkeys]
								if _, err := store.Take(b.Context(), backend.Request{Key: k, Rule: rule, Now: time.Now(), Cost: 1}); err != nil {
									b.Error(err)
									return
								}
								decisions.Add(1)
							}
						})
					}
					wg.Wait()
				}
				load(warm)
				undo()
				if b.Failed() {
					b.FailNow()
				}
				cpu0, sys0, calls0, usec0 := serverStats(b, nodes)
				decisions.Store(0)
				start := time.Now()
				load(measure)
				elapsed := time.Since(start)
				cpu1, sys1, calls1, usec1 := serverStats(b, nodes)
				closeStore()
				n := float64(decisions.Load())
				got[name(c)] = append(got[name(c)], figures{
					dps: n / elapsed.Seconds(), cpu: (cpu1 - cpu0) * 1e6 / n, sys: (sys1 - sys0) * 1e6 / n,
					calls: float64(calls1-calls0) / n, script: float64(usec1-usec0) / n,
				})
			}
		}
		for _, c := range cells {
			fs := got[name(c)]
			med := func(f func(figures) float64) float64 {
				vs := make([]float64, len(fs))
				for i := range fs {
					vs[i] = f(fs[i])
				}
				slices.Sort(vs)
				return vs[len(vs)/2]
			}
			b.Run(client+"/"+name(c), func(b *testing.B) {
				b.ReportMetric(med(func(f figures) float64 { return f.dps }), "decisions/s")
				b.ReportMetric(med(func(f figures) float64 { return f.cpu }), "server-µs/decision")
				b.ReportMetric(med(func(f figures) float64 { return f.sys }), "server-sys-µs/decision")
				b.ReportMetric(med(func(f figures) float64 { return f.script }), "script-µs/decision")
				b.ReportMetric(med(func(f figures) float64 { return 1 / f.calls }), "takes/call")
			})
		}
		// The split, per round, from the b16 and b1 cells of each topology.
		for _, topo := range []string{"single", "cluster"} {
			var perTake, perCall []float64
			for r := range rounds {
				bt, un := got[topo+"/b16"][r], got[topo+"/b1"][r]
				call := (un.cpu - bt.cpu) / (un.calls - bt.calls)
				perCall = append(perCall, call)
				perTake = append(perTake, un.cpu-call*un.calls)
			}
			slices.Sort(perTake)
			slices.Sort(perCall)
			b.Logf("%s %s: %.2f µs per take + %.2f µs per script call (medians over rounds)", client, topo, perTake[rounds/2], perCall[rounds/2])
		}
	}
}

// cpuStore returns a store of the named client over addrs, and its close.
func cpuStore(b *testing.B, client string, cluster bool, addrs []string, batch int) (backend.Store, func()) {
	switch client {
	case "goredis":
		var c redis.UniversalClient
		if cluster {
			c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, PoolSize: 128})
		} else {
			c = redis.NewClient(&redis.Options{Addr: addrs[0], PoolSize: 128})
		}
		s, err := goredisstore.New(c, goredisstore.WithBatching(batch))
		require.NoError(b, err)
		return s, func() { _ = c.Close() }
	default:
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
		require.NoError(b, err)
		s, err := rueidisstore.New(c, rueidisstore.WithBatching(batch))
		require.NoError(b, err)
		return s, c.Close
	}
}

// serverStats sums over nodes the CPU seconds used (user + system, and
// system alone), the EVALSHA calls and their µs.
func serverStats(b *testing.B, nodes []*redistest.Server) (cpu, sys float64, calls, usec int64) {
	for _, n := range nodes {
		info, err := n.Do("INFO", "all")
		require.NoError(b, err)
		for _, line := range strings.Split(info, "\n") {
			line = strings.TrimSpace(line)
			if k, v, ok := strings.Cut(line, ":"); ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
				f, err := strconv.ParseFloat(v, 64)
				require.NoError(b, err)
				cpu += f
				if k == "used_cpu_sys" {
					sys += f
				}
			}
			if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:"); ok {
				for _, kv := range strings.Split(rest, ",") {
					k, v, _ := strings.Cut(kv, "=")
					switch k {
					case "calls":
						c, _ := strconv.ParseInt(v, 10, 64)
						calls += c
					case "usec":
						u, _ := strconv.ParseInt(v, 10, 64)
						usec += u
					}
				}
			}
		}
	}
	return cpu, sys, calls, usec
}
