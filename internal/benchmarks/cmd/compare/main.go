// Command compare runs the whole comparison of limitkit with its peers and
// with the limits of the machine, in one process, and prints it as
// markdown tables with ratios.
//
//	cd internal/benchmarks && go run ./cmd/compare [-count 3] [-o results.md]
//
// It runs, -count times, interleaved so that a noisy moment hits every
// contender alike: every in-memory contender on every workload, serially
// and in parallel; every Redis contender on every workload at 1, 8 and 64
// concurrent callers against one private redis-server it starts on a free
// loopback port; and redis-benchmark, with and without pipelining, running
// limitkit's scripts, a trivial script and INCR against that same server.
// Tables give medians. Every loop is bounded in time (-memtime, -redistime)
// or in count (redis-benchmark -n), so a full run takes four to five
// minutes on two cores.
//
// Read the figures as ratios measured side by side: absolute numbers move
// with the machine (on a shared two-core VM, ±20% between runs).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/internal/benchmarks"
)

func main() {
	testing.Init()
	count := flag.Int("count", 3, "repetitions; tables show medians")
	memTime := flag.Duration("memtime", 30*time.Millisecond, "target duration of each in-memory benchmark")
	redisTime := flag.Duration("redistime", 80*time.Millisecond, "target duration of each Redis benchmark")
	memory := flag.Bool("memory", true, "run the in-memory benchmarks")
	redis := flag.Bool("redis", true, "run the Redis benchmarks and floors (needs redis-server and redis-benchmark)")
	run := flag.String("run", "", "only contenders whose name matches this regular expression")
	out := flag.String("o", "", "also write the tables to this file")
	flag.Parse()
	filter, err := regexp.Compile(*run)
	if err == nil {
		c := &comparison{count: *count, memTime: *memTime, redisTime: *redisTime, filter: filter, progress: os.Stderr}
		err = c.run(*memory, *redis)
		if err == nil {
			var w io.Writer = os.Stdout
			var f *os.File
			if *out != "" {
				if f, err = os.Create(*out); err == nil {
					w = io.MultiWriter(os.Stdout, f)
				}
			}
			if err == nil {
				c.print(w)
				if f != nil {
					err = f.Close()
				}
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

// sample is one measurement of one contender on one workload and mode.
type sample struct {
	ns, allocs, bytes float64
	admitted, errors  float64
	// Redis only, per decision: the server's CPU time (µs), the time its
	// EVALSHA calls took (commandstats usec; 0 without scripts), and the
	// commands it ran (those inside scripts included).
	serverUsec, scriptUsec, calls float64
}

type cellKey struct {
	section, contender, workload, mode string
}

type floorKey struct {
	name, workload string
	pipeline       int
}

type comparison struct {
	count              int
	memTime, redisTime time.Duration
	filter             *regexp.Regexp
	progress           io.Writer

	started       time.Time
	elapsed       time.Duration
	redisVersion  string
	samples       map[cellKey][]sample
	order         map[string][]benchmarks.Contender // contenders by section, in run order
	floors        map[floorKey][]benchmarks.FloorResult
	floorOrder    []floorKey
	skippedRedis  string
	memWorkloads  []benchmarks.Workload
	redisCallers  []int
	floorWorkload []benchmarks.Workload
}

func (c *comparison) logf(format string, args ...any) {
	fmt.Fprintf(c.progress, "[%5.1fs] "+format+"\n", append([]any{time.Since(c.started).Seconds()}, args...)...)
}

func (c *comparison) run(memory, redis bool) error {
	c.started = time.Now()
	c.samples = map[cellKey][]sample{}
	c.order = map[string][]benchmarks.Contender{}
	c.floors = map[floorKey][]benchmarks.FloorResult{}
	c.memWorkloads = benchmarks.Workloads()
	c.redisCallers = benchmarks.Callers
	c.floorWorkload = []benchmarks.Workload{{Keys: 10_000}, {Keys: 10_000, Deny: true}}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	var memCells []*benchmarks.Cell
	if memory {
		for _, ct := range benchmarks.MemoryContenders() {
			if !c.filter.MatchString(ct.Name) {
				continue
			}
			c.order["memory"] = append(c.order["memory"], ct)
			for _, w := range c.memWorkloads {
				cell, err := benchmarks.Prepare(ctx, ct, w)
				if err != nil {
					return err
				}
				defer cell.Close()
				memCells = append(memCells, cell)
			}
		}
	}
	var srv *benchmarks.Server
	if redis {
		var err error
		if srv, err = benchmarks.StartServer(); err != nil {
			c.skippedRedis = err.Error()
		} else if _, err := exec.LookPath("redis-benchmark"); err != nil {
			c.skippedRedis = "redis-benchmark not found on PATH (apt-get install redis-tools)"
			_ = srv.Close()
			srv = nil
		}
		if srv != nil {
			defer srv.Close()
			c.redisVersion = srv.Version(ctx)
			for _, ct := range benchmarks.RedisContenders(srv.Addr()) {
				if c.filter.MatchString(ct.Name) {
					c.order["redis"] = append(c.order["redis"], ct)
				}
			}
		}
	}

	for rep := range c.count {
		if memory {
			if err := flag.Set("test.benchtime", c.memTime.String()); err != nil {
				return err
			}
			c.logf("round %d/%d: in memory, %d cells", rep+1, c.count, len(memCells))
			for _, cell := range memCells {
				if err := ctx.Err(); err != nil {
					return err
				}
				for _, mode := range []string{"serial", "parallel"} {
					bench := cell.Serial()
					if mode == "parallel" {
						bench = cell.Parallel()
					}
					s, err := measure(cell, bench, nil, nil)
					if err != nil {
						return err
					}
					c.add(cellKey{"memory", cell.Contender.Name, cell.Workload.String(), mode}, s)
				}
			}
		}
		if srv != nil {
			if err := c.redisRound(ctx, srv, rep); err != nil {
				return err
			}
		}
	}
	c.elapsed = time.Since(c.started)
	return nil
}

// measure runs one benchmark function and turns its result into a sample.
// With srv, the server's statistics are reset before and read after.
func measure(cell *benchmarks.Cell, bench func(*testing.B), ctx context.Context, srv *benchmarks.Server) (sample, error) {
	var cpu0 time.Duration
	if srv != nil {
		if err := srv.ResetStats(ctx); err != nil {
			return sample{}, err
		}
		var err error
		if cpu0, err = srv.CPU(ctx); err != nil {
			return sample{}, err
		}
	}
	d0, a0, e0 := cell.Decisions(), cell.Admitted(), cell.Errors()
	r := testing.Benchmark(bench)
	if r.N == 0 {
		return sample{}, fmt.Errorf("%s %s: the benchmark failed", cell.Contender.Name, cell.Workload)
	}
	n := float64(cell.Decisions() - d0)
	s := sample{
		ns:       float64(r.T.Nanoseconds()) / float64(r.N),
		allocs:   float64(r.AllocsPerOp()),
		bytes:    float64(r.AllocedBytesPerOp()),
		admitted: float64(cell.Admitted()-a0) / n,
		errors:   float64(cell.Errors()-e0) / n,
	}
	if srv != nil {
		cpu1, err := srv.CPU(ctx)
		if err != nil {
			return sample{}, err
		}
		stats, err := srv.CommandStats(ctx)
		if err != nil {
			return sample{}, err
		}
		var calls int64
		for name, st := range stats {
			switch name {
			case "info", "config|resetstat", "config", "ping", "hello", "client|setinfo", "client", "script|load", "script", "select":
				continue
			}
			calls += st.Calls
		}
		// Per decision, not per call: a batch call decides many.
		s.scriptUsec = float64(stats["evalsha"].Usec) / n
		s.serverUsec = float64((cpu1 - cpu0).Microseconds()) / n
		s.calls = float64(calls) / n
	}
	return s, nil
}

func (c *comparison) redisRound(ctx context.Context, srv *benchmarks.Server, rep int) error {
	if err := flag.Set("test.benchtime", c.redisTime.String()); err != nil {
		return err
	}
	c.logf("round %d/%d: Redis, %d contenders", rep+1, c.count, len(c.order["redis"]))
	for _, ct := range c.order["redis"] {
		for _, w := range c.memWorkloads {
			if ct.Group == "floor" && w.Deny {
				continue // a floor does not depend on the limit
			}
			if ct.Group == "experiment" && w.Keys == 1 {
				continue // keep the run short: experiments on 10,000 keys only
			}
			if err := srv.FlushAll(ctx); err != nil {
				return err
			}
			cell, err := benchmarks.Prepare(ctx, ct, w)
			if err != nil {
				return err
			}
			for _, callers := range c.redisCallers {
				s, err := measure(cell, cell.Concurrent(callers), ctx, srv)
				if err != nil {
					cell.Close()
					return err
				}
				c.add(cellKey{"redis", ct.Name, w.String(), "c=" + strconv.Itoa(callers)}, s)
			}
			cell.Close()
		}
	}
	if c.filter.String() != "" && !c.filter.MatchString("redis-benchmark") {
		return nil
	}
	floors, err := benchmarks.Floors(ctx, srv, time.Now().UnixMilli(), 64, c.floorWorkload)
	if err != nil {
		return err
	}
	c.logf("round %d/%d: redis-benchmark, %d runs", rep+1, c.count, len(floors))
	for _, f := range floors {
		res, err := f.Run(ctx, srv)
		if err != nil {
			return err
		}
		k := floorKey{f.Name, f.Workload.String(), f.Pipeline}
		if _, ok := c.floors[k]; !ok {
			c.floorOrder = append(c.floorOrder, k)
		}
		c.floors[k] = append(c.floors[k], res)
	}
	return srv.FlushAll(ctx)
}

func (c *comparison) add(k cellKey, s sample) {
	c.samples[k] = append(c.samples[k], s)
}

// median returns the median of f over the cell's samples, and whether
// there were any.
func (c *comparison) median(k cellKey, f func(sample) float64) (float64, bool) {
	ss := c.samples[k]
	if len(ss) == 0 {
		return 0, false
	}
	vs := make([]float64, len(ss))
	for i, s := range ss {
		vs[i] = f(s)
	}
	return medianOf(vs), true
}

func medianOf(vs []float64) float64 {
	slices.Sort(vs)
	if n := len(vs); n%2 == 1 {
		return vs[n/2]
	} else {
		return (vs[n/2-1] + vs[n/2]) / 2
	}
}

func ns(s sample) float64        { return s.ns }
func allocs(s sample) float64    { return s.allocs }
func bytesOp(s sample) float64   { return s.bytes }
func admitted(s sample) float64  { return s.admitted }
func errs(s sample) float64      { return s.errors }
func serverUs(s sample) float64  { return s.serverUsec }
func scriptUs(s sample) float64  { return s.scriptUsec }
func calls(s sample) float64     { return s.calls }
func perSecond(s sample) float64 { return 1e9 / s.ns }

func (c *comparison) floorMedian(k floorKey, f func(benchmarks.FloorResult) float64) (float64, bool) {
	rs := c.floors[k]
	if len(rs) == 0 {
		return 0, false
	}
	vs := make([]float64, len(rs))
	for i, r := range rs {
		vs[i] = f(r)
	}
	return medianOf(vs), true
}

func floorRPS(r benchmarks.FloorResult) float64  { return r.PerSecond }
func floorUsec(r benchmarks.FloorResult) float64 { return r.ServerUsec }

// fastestPeer returns the peer with the lowest median ns/op in the cell.
func (c *comparison) fastestPeer(section, workload, mode string) (string, float64) {
	best, bestNs := "", math.Inf(1)
	for _, ct := range c.order[section] {
		if ct.Group != "peer" {
			continue
		}
		if v, ok := c.median(cellKey{section, ct.Name, workload, mode}, ns); ok && v < bestNs {
			best, bestNs = ct.Name, v
		}
	}
	return best, bestNs
}

func (c *comparison) print(w io.Writer) {
	fmt.Fprintf(w, "# limitkit vs peers and floors\n\n")
	fmt.Fprintf(w, "%s, %s, GOMAXPROCS=%d, %s", c.started.UTC().Format("2006-01-02 15:04 UTC"), runtime.Version(), runtime.GOMAXPROCS(0), cpuModel())
	if c.redisVersion != "" {
		fmt.Fprintf(w, ", redis-server %s", c.redisVersion)
	}
	fmt.Fprintf(w, ". Medians of %d rounds; run took %s.\n\n", c.count, c.elapsed.Round(time.Second))
	if c.order["memory"] != nil {
		c.printMemory(w)
	}
	if c.skippedRedis != "" {
		fmt.Fprintf(w, "Redis benchmarks skipped: %s\n\n", c.skippedRedis)
	}
	if c.order["redis"] != nil {
		c.printRedis(w)
	}
	if len(c.floorOrder) > 0 {
		c.printFloors(w)
	}
}

func (c *comparison) printMemory(w io.Writer) {
	fmt.Fprintf(w, "## In memory\n\n")
	fmt.Fprintf(w, "ns per decision (allocs per decision); `store` is memorystore.Store.Take with a backend.Request stamped with clock.System (limitkit's default clock: time.Now once a second, monotonic time in between), `limiter` is limiter.Limiter.Allow on that store. Parallel: b.RunParallel on GOMAXPROCS goroutines, ns per decision of the whole machine. The row ending in \"coarse clock\" is an experiment: the limiter reading benchmarks.CoarseClock (an atomic refreshed every ms) instead of clock.System. Never-deny limits: %s; a cell where a limiter admitted less than 99%% (never-deny) or more than 1%% (deny-heavy) is marked with the share admitted.\n\n", neverDenyRules())
	modes := []string{"serial", "parallel"}
	for _, keys := range []int{1, 10_000} {
		fmt.Fprintf(w, "### %s\n\n", keysTitle(keys))
		var ws []benchmarks.Workload
		for _, wl := range c.memWorkloads {
			if wl.Keys == keys {
				ws = append(ws, wl)
			}
		}
		header := []string{"contender"}
		for _, wl := range ws {
			for _, m := range modes {
				header = append(header, wl.Config()+" "+m)
			}
		}
		rows := [][]string{}
		for _, ct := range c.order["memory"] {
			row := []string{ct.Name}
			for _, wl := range ws {
				for _, m := range modes {
					k := cellKey{"memory", ct.Name, wl.String(), m}
					v, ok := c.median(k, ns)
					if !ok {
						row = append(row, "")
						continue
					}
					a, _ := c.median(k, allocs)
					cell := fmt.Sprintf("%.0f (%s)", v, fmtAllocs(a))
					cell += c.admittedNote(k, wl)
					row = append(row, cell)
				}
			}
			rows = append(rows, row)
		}
		table(w, header, rows)

		// Ratios: the fastest peer's ns over limitkit's (above 1: limitkit faster).
		header = []string{"limitkit vs fastest peer"}
		rows = nil
		fastest := []string{"fastest peer"}
		for _, wl := range ws {
			for _, m := range modes {
				name, _ := c.fastestPeer("memory", wl.String(), m)
				fastest = append(fastest, name)
			}
		}
		for _, ct := range c.order["memory"] {
			if ct.Algorithm == "" {
				continue // a peer
			}
			row := []string{ct.Name}
			for _, wl := range ws {
				for _, m := range modes {
					_, best := c.fastestPeer("memory", wl.String(), m)
					v, ok := c.median(cellKey{"memory", ct.Name, wl.String(), m}, ns)
					if !ok || math.IsInf(best, 1) {
						row = append(row, "")
						continue
					}
					row = append(row, fmt.Sprintf("%.2f×", best/v))
				}
			}
			rows = append(rows, row)
		}
		for _, wl := range ws {
			for _, m := range modes {
				header = append(header, wl.Config()+" "+m)
			}
		}
		rows = append(rows, fastest)
		fmt.Fprintf(w, "Speed-up of limitkit over the fastest peer of each column (fastest peer's ns / limitkit's ns; above 1 means limitkit is faster):\n\n")
		table(w, header, rows)
	}
}

// neverDenyRules lists the never-deny limit of each algorithm.
func neverDenyRules() string {
	var parts []string
	for _, alg := range algorithms.Names() {
		r := benchmarks.Workload{Keys: 1}.Rule(alg)
		parts = append(parts, fmt.Sprintf("%s %d per %v", alg, r.Limit, r.Window))
	}
	return strings.Join(parts, ", ") + " (peers: 10^9 per second for x/time/rate and throttled, 2^40 per hour for go-limiter and ulule)"
}

// admittedNote marks a cell whose admitted share is not what its workload
// promises.
func (c *comparison) admittedNote(k cellKey, wl benchmarks.Workload) string {
	a, _ := c.median(k, admitted)
	e, _ := c.median(k, errs)
	note := ""
	if (!wl.Deny && a < 0.99) || (wl.Deny && a > 0.01) {
		note = fmt.Sprintf(" [%.0f%% admitted]", 100*a)
	}
	if e > 0 {
		note += fmt.Sprintf(" [%.1f%% errors]", 100*e)
	}
	return note
}

func keysTitle(keys int) string {
	if keys == 1 {
		return "1 key"
	}
	return humanInt(keys) + " keys"
}

func (c *comparison) printRedis(w io.Writer) {
	fmt.Fprintf(w, "## Redis\n\n")
	fmt.Fprintf(w, "Decisions per second at 1, 8 and 64 concurrent callers (goroutines sharing one client), one redis-server on 127.0.0.1 (FLUSHALL before each contender and workload). At 64 callers also: client allocations and bytes per decision (whole process), the server's CPU time per decision (INFO cpu, used_cpu_sys + used_cpu_user: script, parsing and network I/O), the server's time in EVALSHA per decision (INFO commandstats usec over decisions: the scripts alone; limitkit's stores send up to 16 concurrent decisions in one batch call) and the commands the server ran per decision (those inside scripts included). Both clients run with their defaults (go-redis: a pool of 10 per GOMAXPROCS; rueidis: auto-pipelining), as do limitkit's stores (batching on), except in the rows naming a setting, which are experiments (10,000 keys only). Floors: INCR and `EVALSHA %s` through the same clients.\n\n", benchmarks.TrivialScript)
	for _, wl := range c.memWorkloads {
		fmt.Fprintf(w, "### %s, %s\n\n", keysTitle(wl.Keys), wl.Config())
		header := []string{"contender"}
		for _, n := range c.redisCallers {
			header = append(header, fmt.Sprintf("c=%d /s", n))
		}
		header = append(header, "allocs (B) /decision", "server CPU µs /decision", "EVALSHA µs /decision", "cmds /decision")
		var rows [][]string
		last := "c=" + strconv.Itoa(c.redisCallers[len(c.redisCallers)-1])
		for _, ct := range c.order["redis"] {
			wk := wl
			if ct.Group == "floor" {
				wk.Deny = false
			}
			if _, ok := c.median(cellKey{"redis", ct.Name, wk.String(), last}, ns); !ok {
				continue // not run on this workload
			}
			row := []string{ct.Name}
			for _, n := range c.redisCallers {
				k := cellKey{"redis", ct.Name, wk.String(), "c=" + strconv.Itoa(n)}
				v, ok := c.median(k, perSecond)
				if !ok {
					row = append(row, "")
					continue
				}
				row = append(row, humanInt(int(math.Round(v)))+c.admittedNote(k, wk))
			}
			k := cellKey{"redis", ct.Name, wk.String(), last}
			a, _ := c.median(k, allocs)
			b, _ := c.median(k, bytesOp)
			us, _ := c.median(k, serverUs)
			sus, _ := c.median(k, scriptUs)
			cl, _ := c.median(k, calls)
			script := "-"
			if sus > 0 {
				script = fmt.Sprintf("%.2f", sus)
			}
			row = append(row, fmt.Sprintf("%s (%.0f)", fmtAllocs(a), b), fmt.Sprintf("%.1f", us), script, fmt.Sprintf("%.2f", cl))
			rows = append(rows, row)
		}
		table(w, header, rows)
	}
	c.printRedisRatios(w)
}

// printRedisRatios compares, at 64 callers, each limitkit Redis contender
// with the peers and the redis-benchmark floor of its own script.
func (c *comparison) printRedisRatios(w io.Writer) {
	last := "c=" + strconv.Itoa(c.redisCallers[len(c.redisCallers)-1])
	var peers []benchmarks.Contender
	for _, ct := range c.order["redis"] {
		if ct.Group == "peer" {
			peers = append(peers, ct)
		}
	}
	fmt.Fprintf(w, "### Ratios at %s\n\n", strings.ReplaceAll(last, "c=", "")+" callers")
	fmt.Fprintf(w, "limitkit's decisions/s over each peer's, and over redis-benchmark's (-c 64) running the same script with the same ARGV at a fixed time (-P 1 and -P 16, see Floors).\n\n")
	for _, wl := range c.memWorkloads {
		header := []string{fmt.Sprintf("%s, %s", keysTitle(wl.Keys), wl.Config())}
		for _, p := range peers {
			header = append(header, "vs "+p.Name)
		}
		hasFloor := slices.Contains(c.floorWorkload, wl) && len(c.floorOrder) > 0
		if hasFloor {
			header = append(header, "vs redis-benchmark -P 1", "vs redis-benchmark -P 16")
		}
		var rows [][]string
		for _, ct := range c.order["redis"] {
			if ct.Algorithm == "" {
				continue // a peer or a floor
			}
			v, ok := c.median(cellKey{"redis", ct.Name, wl.String(), last}, perSecond)
			if !ok {
				continue
			}
			row := []string{ct.Name}
			for _, p := range peers {
				pv, ok := c.median(cellKey{"redis", p.Name, wl.String(), last}, perSecond)
				row = append(row, ratio(v, pv, ok))
			}
			if hasFloor {
				for _, pl := range []int{1, 16} {
					fv, ok := c.floorMedian(floorKey{string(ct.Algorithm), wl.String(), pl}, floorRPS)
					row = append(row, ratio(v, fv, ok))
				}
			}
			rows = append(rows, row)
		}
		table(w, header, rows)
	}
}

func ratio(v, base float64, ok bool) string {
	if !ok || base == 0 {
		return ""
	}
	return fmt.Sprintf("%.2f×", v/base)
}

func (c *comparison) printFloors(w io.Writer) {
	fmt.Fprintf(w, "## Floors: redis-benchmark on the same server\n\n")
	fmt.Fprintf(w, "`redis-benchmark -c 64 -r 10000` (keys `rb:{__rand_int__}` + the algorithm's suffix), requests per second; limitkit's scripts get the ARGV of Rule.LuaArgs at a fixed time (deny-heavy: every key spent first). Server µs per call is INFO commandstats' usec/calls of that command during the -P 16 run.\n\n")
	header := []string{"command", "workload", "-P 1 /s", "-P 16 /s", "server µs /call"}
	var rows [][]string
	for _, k := range c.floorOrder {
		if k.pipeline != 1 {
			continue
		}
		p1, _ := c.floorMedian(k, floorRPS)
		k16 := k
		k16.pipeline = 16
		p16, _ := c.floorMedian(k16, floorRPS)
		us, _ := c.floorMedian(k16, floorUsec)
		rows = append(rows, []string{k.name, k.workload, humanInt(int(p1)), humanInt(int(p16)), fmt.Sprintf("%.2f", us)})
	}
	table(w, header, rows)
}

func table(w io.Writer, header []string, rows [][]string) {
	fmt.Fprintf(w, "| %s |\n", strings.Join(header, " | "))
	fmt.Fprintf(w, "|%s\n", strings.Repeat("---|", len(header)))
	for _, r := range rows {
		fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
	}
	fmt.Fprintln(w)
}

func fmtAllocs(a float64) string {
	if a == math.Trunc(a) {
		return strconv.Itoa(int(a))
	}
	return fmt.Sprintf("%.1f", a)
}

// humanInt writes n with thousands separators.
func humanInt(n int) string {
	s := strconv.Itoa(n)
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}
