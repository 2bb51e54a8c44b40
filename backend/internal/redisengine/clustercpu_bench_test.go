package redisengine_test

import (
	"cmp"
	"fmt"
	"os"
	"runtime"
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
	"github.com/limitkit/limitkit/backend/internal/redisengine"
	"github.com/limitkit/limitkit/backend/rueidisstore"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/internal/rediswire"
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
// 3,000 keys of one master, so that one server is busy, as on a single
// node, but in cluster mode; "cluster1share" sends only the keys of the
// cluster cell that one master holds (about 1,000). In these two cells the
// other two masters run idle: loaded-µs and idle-µs split the CPU between
// the busy master and the idle ones. "callers21" cells drive one node with
// a third of the callers, the concurrency each master sees in the cluster;
// "callers192" gives each master the concurrency of one node under 64.
// wakeups and preempts count the servers' main-thread context switches,
// voluntary (it waited for commands) and involuntary.
//
// With LIMITKIT_CPU_PIN=1 every redis-server (the single node's and the
// masters) runs on one CPU and this process (GOMAXPROCS 1) on another, the
// same for both topologies, so that the client and the servers never share
// a core; run it with and without. It ignores b.N:
//
//	go test -run '^$' -bench BenchmarkServerCPU -benchtime 1x -v ./backend/internal/redisengine/
//	LIMITKIT_CPU_PIN=1 go test -run '^$' -bench BenchmarkServerCPU -benchtime 1x -v ./backend/internal/redisengine/
func BenchmarkServerCPU(b *testing.B) {
	const rounds, callers, nkeys = 3, 64, 3000
	warm, measure := time.Second, 2*time.Second
	single := redistest.Start(b)
	cluster := redistest.StartCluster(b, 3, 0)
	if os.Getenv("LIMITKIT_CPU_PIN") == "1" {
		pids := []int{single.PID()}
		for _, m := range cluster.Masters {
			pids = append(pids, m.PID())
		}
		serverCPU, clientCPU, restore, err := pinCPUs(pids)
		require.NoError(b, err)
		procs := runtime.GOMAXPROCS(1)
		b.Cleanup(func() {
			runtime.GOMAXPROCS(procs)
			require.NoError(b, restore())
		})
		b.Logf("pinned: redis-servers on CPU %d, this process on CPU %d, GOMAXPROCS 1", serverCPU, clientCPU)
	} else {
		b.Logf("not pinned (LIMITKIT_CPU_PIN=1 pins): GOMAXPROCS %d", runtime.GOMAXPROCS(0))
	}
	b.Logf("load average at start: %s", loadAverage())
	owner := slotOwners(b, cluster)
	type cell struct {
		topo     string // "single", "cluster", "cluster1" or "cluster1share" (see above)
		batch    int
		inFlight int // per cluster node; 0 the default
		callers  int // 0: callers
	}
	// The callers21 cells give one node the concurrency each master of the
	// cluster sees from 64 callers.
	cells := []cell{
		{"single", 16, 0, 0}, {"cluster", 16, 0, 0}, {"cluster", 16, 4, 0}, {"cluster1", 16, 0, 0},
		{"cluster1share", 16, 0, 0}, {"single", 16, 0, callers / 3}, {"single", 1, 0, 0}, {"cluster", 1, 0, 0},
		{"single", 1, 0, callers / 3}, {"cluster", 16, 0, callers * 3},
	}
	name := func(c cell) string {
		n := fmt.Sprintf("%s/b%d", c.topo, c.batch)
		if c.inFlight > 0 {
			n += "/inflight" + strconv.Itoa(c.inFlight)
		}
		if c.callers > 0 {
			n += "/callers" + strconv.Itoa(c.callers)
		}
		return n
	}
	rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 10_000, Window: time.Minute}
	type figures struct{ dps, cpu, sys, calls, script, loaded, idle, idlePerSec, wakeups, preempts float64 }
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
					undo = redisengine.SetNodeBatchesInFlight(c.inFlight)
				}
				store, closeStore := cpuStore(b, client, c.topo != "single", addrs, c.batch)
				keys := make([]backend.Key, 0, nkeys)
				prefix := fmt.Sprintf("cpu:%d:", time.Now().UnixNano())
				for i := 0; len(keys) < nkeys && (c.topo != "cluster1share" || i < nkeys); i++ {
					k := backend.Key{Prefix: prefix, ID: "k" + strconv.Itoa(i)}
					if strings.HasPrefix(c.topo, "cluster1") && owner(redistest.KeySlot(rediswire.Key(k, rule))) != 0 {
						continue
					}
					keys = append(keys, k)
				}
				var decisions atomic.Int64
				load := func(d time.Duration) {
					var next atomic.Int64
					end := time.Now().Add(d)
					var wg sync.WaitGroup
					for range cmp.Or(c.callers, callers) {
						wg.Go(func() {
							for time.Now().Before(end) {
								k := keys[next.Add(1)%int64(len(keys))]
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
				before := serverStats(b, nodes)
				vol0, invol0 := switches(b, nodes)
				decisions.Store(0)
				start := time.Now()
				load(measure)
				elapsed := time.Since(start)
				after := serverStats(b, nodes)
				vol1, invol1 := switches(b, nodes)
				closeStore()
				n := float64(decisions.Load())
				var d nodeStats                        // summed over the nodes
				perNode := make([]float64, len(nodes)) // CPU seconds
				for i := range nodes {
					perNode[i] = after[i].cpu - before[i].cpu
					d.cpu += perNode[i]
					d.sys += after[i].sys - before[i].sys
					d.calls += after[i].calls - before[i].calls
					d.usec += after[i].usec - before[i].usec
				}
				f := figures{
					dps: n / elapsed.Seconds(), cpu: d.cpu * 1e6 / n, sys: d.sys * 1e6 / n,
					calls: float64(d.calls) / n, script: float64(d.usec) / n,
					wakeups: float64(vol1-vol0) / n, preempts: float64(invol1-invol0) / n,
				}
				if strings.HasPrefix(c.topo, "cluster1") {
					f.loaded = perNode[0] * 1e6 / n
					f.idle = (d.cpu - perNode[0]) * 1e6 / n
					f.idlePerSec = (d.cpu - perNode[0]) * 1e6 / elapsed.Seconds()
				}
				got[name(c)] = append(got[name(c)], f)
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
				b.ReportMetric(med(func(f figures) float64 { return f.cpu - f.sys }), "server-user-µs/decision")
				b.ReportMetric(med(func(f figures) float64 { return f.sys }), "server-sys-µs/decision")
				b.ReportMetric(med(func(f figures) float64 { return f.script }), "script-µs/decision")
				b.ReportMetric(med(func(f figures) float64 { return 1 / f.calls }), "takes/call")
				b.ReportMetric(med(func(f figures) float64 { return f.wakeups }), "wakeups/decision")
				b.ReportMetric(med(func(f figures) float64 { return f.preempts }), "preempts/decision")
				if strings.HasPrefix(c.topo, "cluster1") {
					b.ReportMetric(med(func(f figures) float64 { return f.loaded }), "loaded-µs/decision")
					b.ReportMetric(med(func(f figures) float64 { return f.idle }), "idle-µs/decision")
					b.ReportMetric(med(func(f figures) float64 { return f.idlePerSec }), "idle-µs/s")
				}
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
	b.Logf("load average at end: %s", loadAverage())
}

// slotOwners returns the index in cluster.Masters of the master of a slot.
// Masters serve consecutive slot ranges in order (redistest.StartCluster),
// so it looks for where each range starts, and checks every range's ends.
func slotOwners(b *testing.B, cluster *redistest.Cluster) func(slot int) int {
	index := func(slot int) int {
		return slices.Index(cluster.Masters, cluster.MasterOf(slot))
	}
	starts := []int{0}
	for m := 1; m < len(cluster.Masters); m++ {
		lo, hi := starts[m-1], redistest.NumSlots-1 // the first slot of master m is in (lo, hi]
		for hi-lo > 1 {
			if mid := (lo + hi) / 2; index(mid) >= m {
				hi = mid
			} else {
				lo = mid
			}
		}
		starts = append(starts, hi)
	}
	for m, s := range starts {
		end := redistest.NumSlots - 1
		if m+1 < len(starts) {
			end = starts[m+1] - 1
		}
		require.Equal(b, m, index(s), "master of slot %d", s)
		require.Equal(b, m, index(end), "master of slot %d", end)
	}
	return func(slot int) int {
		m, _ := slices.BinarySearch(starts, slot+1)
		return m - 1
	}
}

// loadAverage returns the machine's 1, 5 and 15 minute load averages.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
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

// switches sums over nodes the context switches of each server's main
// thread, which runs its event loop: voluntary ones (it waited for
// commands, so one per wakeup) and involuntary ones (the kernel gave its CPU
// to another thread).
func switches(b *testing.B, nodes []*redistest.Server) (voluntary, involuntary int64) {
	for _, n := range nodes {
		v, inv, err := contextSwitches(n.PID())
		require.NoError(b, err)
		voluntary += v
		involuntary += inv
	}
	return voluntary, involuntary
}

// nodeStats are one node's CPU seconds used (user + system, and system
// alone), EVALSHA calls and their µs.
type nodeStats struct {
	cpu, sys    float64
	calls, usec int64
}

// serverStats returns the nodeStats of each of nodes, from INFO.
func serverStats(b *testing.B, nodes []*redistest.Server) []nodeStats {
	out := make([]nodeStats, len(nodes))
	for i, n := range nodes {
		info, err := n.Do("INFO", "all")
		require.NoError(b, err)
		st := &out[i]
		for _, line := range strings.Split(info, "\n") {
			line = strings.TrimSpace(line)
			if k, v, ok := strings.Cut(line, ":"); ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
				f, err := strconv.ParseFloat(v, 64)
				require.NoError(b, err)
				st.cpu += f
				if k == "used_cpu_sys" {
					st.sys += f
				}
			}
			if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:"); ok {
				for _, kv := range strings.Split(rest, ",") {
					k, v, _ := strings.Cut(kv, "=")
					switch k {
					case "calls":
						c, _ := strconv.ParseInt(v, 10, 64)
						st.calls += c
					case "usec":
						u, _ := strconv.ParseInt(v, 10, 64)
						st.usec += u
					}
				}
			}
		}
	}
	return out
}
