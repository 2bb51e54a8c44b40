// Command compare runs the whole comparison of limitkit with its peers and
// with the limits of the machine, in one process, and prints it as
// markdown tables with ratios.
//
//	cd internal/benchmarks && go run ./cmd/compare [-count 3] [-o results.md]
//	cd internal/benchmarks && go run ./cmd/compare -quick   # smoke run, under 2 minutes
//
// It runs -count rounds. In each, every in-memory contender on every
// workload, serially and in parallel; every Redis contender (limitkit's
// stores, the peers, the seed article's script, the floors) on each Redis
// workload against one private redis-server on a free loopback port; and
// redis-benchmark running limitkit's scripts, a trivial script and INCR on
// that server. Rounds interleave the contenders: round 1 runs them in
// order, each later round starts further down the list (rotated), so that a
// noisy moment does not always hit the same neighbours. Tables give
// medians over rounds; ratios are medians of the per-round ratios (each
// round's pair ran minutes apart at most), with their range.
//
// A Redis cell is measured at steady state: a new client (a go-redis pool
// dialled in full), then -warmup of the cell's own workload (at least as
// long as the logs' window, so logs hold their steady contents; deny-heavy
// keys spent), then -redistime measured. Every loop is bounded in time or
// count; the program prints its estimate first.
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

// config is the command line.
type config struct {
	count                      int
	memTime, redisTime, warmup time.Duration
	callers                    []int
	floorRequests              int
	memory, redis, runFloors   bool
	filter                     *regexp.Regexp
	out                        string
}

func main() {
	testing.Init()
	cfg, err := parseFlags(flag.CommandLine, os.Args[1:])
	if err == nil {
		c := &comparison{config: cfg, progress: os.Stderr}
		err = c.run()
		if err == nil {
			var w io.Writer = os.Stdout
			var f *os.File
			if cfg.out != "" {
				if f, err = os.Create(cfg.out); err == nil {
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

// parseFlags reads the command line. -quick changes the defaults of the
// flags not given to those of a smoke run.
func parseFlags(fs *flag.FlagSet, args []string) (config, error) {
	count := fs.Int("count", 3, "rounds; tables show medians (at least 3 for published figures)")
	memTime := fs.Duration("memtime", 30*time.Millisecond, "target duration of each in-memory benchmark")
	redisTime := fs.Duration("redistime", 2*time.Second, "measured duration of each Redis cell, after its warm-up")
	warmup := fs.Duration("warmup", time.Second, "warm-up of each Redis cell, and the window of the never-deny logs")
	callers := fs.String("callers", "64", "concurrent callers of the Redis cells, comma-separated (e.g. 1,8,64); ratios use the last")
	floorRequests := fs.Int("floorrequests", 60_000, "redis-benchmark requests per pipelined run (a quarter unpipelined)")
	quick := fs.Bool("quick", false, "smoke run (under 2 minutes): 1 round, 5ms in memory, 150ms warm-up and 150ms per Redis cell, short floors")
	memory := fs.Bool("memory", true, "run the in-memory benchmarks")
	redis := fs.Bool("redis", true, "run the Redis benchmarks (needs redis-server)")
	floors := fs.Bool("floors", true, "run the redis-benchmark floors (needs redis-benchmark)")
	run := fs.String("run", "", "only contenders whose name matches this regular expression")
	out := fs.String("o", "", "also write the tables to this file")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if *quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for name, v := range map[string]string{"count": "1", "memtime": "5ms", "redistime": "150ms", "warmup": "150ms", "floorrequests": "4000"} {
			if !set[name] {
				if err := fs.Set(name, v); err != nil {
					return config{}, err
				}
			}
		}
	}
	filter, err := regexp.Compile(*run)
	if err != nil {
		return config{}, fmt.Errorf("-run: %w", err)
	}
	cfg := config{count: *count, memTime: *memTime, redisTime: *redisTime, warmup: *warmup, floorRequests: *floorRequests,
		memory: *memory, redis: *redis, runFloors: *floors, filter: filter, out: *out}
	switch {
	case cfg.count < 1:
		return config{}, fmt.Errorf("-count %d: need at least 1 round", cfg.count)
	case cfg.redisTime <= 0 || cfg.warmup <= 0 || cfg.memTime <= 0:
		return config{}, fmt.Errorf("-memtime, -redistime and -warmup must be positive")
	case cfg.warmup < time.Millisecond:
		return config{}, fmt.Errorf("-warmup %v: at least 1ms (it is also the logs' window)", cfg.warmup)
	case cfg.floorRequests < 4:
		return config{}, fmt.Errorf("-floorrequests %d: at least 4", cfg.floorRequests)
	}
	for f := range strings.SplitSeq(*callers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 4096 {
			return config{}, fmt.Errorf("-callers %q: want numbers from 1 to 4096, comma-separated", *callers)
		}
		cfg.callers = append(cfg.callers, n)
	}
	return cfg, nil
}

// sample is one measurement of one contender on one workload and mode.
type sample struct {
	round             int
	ns, allocs, bytes float64
	admitted, errors  float64
	// Redis only, per decision: the server's CPU time by /proc and by
	// INFO cpu (µs), the time its script calls took (commandstats usec),
	// the script calls and all commands it ran (those inside scripts
	// included); script calls per denied decision; over-admissions in the
	// cell (deny-heavy).
	procUsec, infoUsec, scriptUsec, scriptCalls, calls float64
	callsPerDenied                                     float64
	over                                               float64
}

type cellKey struct {
	section, contender, workload, mode string
}

type floorKey struct {
	name, workload string
	pipeline       int
}

type comparison struct {
	config
	progress io.Writer

	started        time.Time
	elapsed        time.Duration
	estimate       time.Duration
	redisVersion   string
	samples        map[cellKey][]sample
	order          map[string][]benchmarks.Contender // contenders by section, in list order
	floors         map[floorKey][]benchmarks.FloorResult
	floorOrder     []floorKey
	skipped        []string
	memWorkloads   []benchmarks.Workload
	redisWorkloads []benchmarks.Workload
}

func (c *comparison) logf(format string, args ...any) {
	fmt.Fprintf(c.progress, "[%5.1fs] "+format+"\n", append([]any{time.Since(c.started).Seconds()}, args...)...)
}

// rotate returns xs rotated left by round's share of its length, so that
// every round starts at another place of the list.
func rotate[T any](xs []T, round, rounds int) []T {
	if len(xs) == 0 {
		return xs
	}
	k := round * len(xs) / max(rounds, 1) % len(xs)
	if k == 0 && round > 0 {
		k = round % len(xs)
	}
	return append(slices.Clone(xs[k:]), xs[:k]...)
}

func (c *comparison) run() error {
	c.started = time.Now()
	c.samples = map[cellKey][]sample{}
	c.order = map[string][]benchmarks.Contender{}
	c.floors = map[floorKey][]benchmarks.FloorResult{}
	c.memWorkloads = benchmarks.Workloads()
	c.redisWorkloads = benchmarks.RedisWorkloads(c.warmup)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	var memCells []*benchmarks.Cell
	if c.memory {
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
	var floors []benchmarks.Floor
	var redisCells []redisCell
	if c.redis {
		var err error
		if srv, err = benchmarks.StartServer(); err != nil {
			c.skipped = append(c.skipped, "Redis benchmarks skipped: "+err.Error())
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
			redisCells = c.redisCells()
			if c.runFloors && (c.filter.String() == "" || c.filter.MatchString("redis-benchmark")) {
				if _, err := exec.LookPath("redis-benchmark"); err != nil {
					c.skipped = append(c.skipped, "redis-benchmark floors skipped: redis-benchmark not found on PATH (apt-get install redis-tools)")
				} else if floors, err = benchmarks.Floors(ctx, srv, time.Now().UnixMilli(), 64, c.redisWorkloads); err != nil {
					return err
				}
			}
		}
	}
	c.estimate = c.estimateRun(len(memCells), len(redisCells), len(floors))
	c.logf("estimated run time: %s (%d rounds: %d in-memory cells, %d Redis cells of %v warm-up + %v × %d caller counts, %d redis-benchmark runs)",
		c.estimate.Round(time.Second), c.count, len(memCells), len(redisCells), c.warmup, c.redisTime, len(c.callers), len(floors))

	for rep := range c.count {
		if c.memory {
			if err := flag.Set("test.benchtime", c.memTime.String()); err != nil {
				return err
			}
			c.logf("round %d/%d: in memory, %d cells", rep+1, c.count, len(memCells))
			for _, cell := range rotate(memCells, rep, c.count) {
				if err := ctx.Err(); err != nil {
					return err
				}
				for _, mode := range []string{"serial", "parallel"} {
					bench := cell.Serial()
					if mode == "parallel" {
						bench = cell.Parallel()
					}
					s, err := measure(cell, bench)
					if err != nil {
						return err
					}
					s.round = rep
					c.add(cellKey{"memory", cell.Contender.Name, cell.Workload.String(), mode}, s)
				}
			}
		}
		if srv != nil {
			if err := c.redisRound(ctx, srv, redisCells, rep); err != nil {
				return err
			}
			if err := c.floorRound(ctx, srv, floors, rep); err != nil {
				return err
			}
		}
	}
	c.elapsed = time.Since(c.started)
	return nil
}

// estimateRun guesses the run's length from its cells: an in-memory
// benchmark about 1.5 times its target plus 0.4 s (testing.Benchmark ramps
// up and collects garbage between runs), a Redis cell its warm-up and measured time plus 0.6 s to set up, and
// a redis-benchmark run about a second at -floorrequests 60,000.
func (c *comparison) estimateRun(memCells, redisCells, floors int) time.Duration {
	per := time.Duration(memCells) * 2 * (c.memTime*3/2 + 400*time.Millisecond)
	per += time.Duration(redisCells) * (c.warmup + time.Duration(len(c.callers))*c.redisTime + 600*time.Millisecond)
	per += time.Duration(floors) * (200*time.Millisecond + time.Duration(c.floorRequests)*time.Second/60_000)
	return per * time.Duration(c.count)
}

// measure runs one in-memory benchmark function and turns its result into
// a sample.
func measure(cell *benchmarks.Cell, bench func(*testing.B)) (sample, error) {
	d0, a0, e0 := cell.Decisions(), cell.Admitted(), cell.Errors()
	r := testing.Benchmark(bench)
	if r.N == 0 {
		return sample{}, fmt.Errorf("%s %s: the benchmark failed", cell.Contender.Name, cell.Workload)
	}
	n := float64(cell.Decisions() - d0)
	return sample{
		ns:       float64(r.T.Nanoseconds()) / float64(r.N),
		allocs:   float64(r.AllocsPerOp()),
		bytes:    float64(r.AllocedBytesPerOp()),
		admitted: float64(cell.Admitted()-a0) / n,
		errors:   float64(cell.Errors()-e0) / n,
	}, nil
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
	fmt.Fprintf(w, ". Medians of %d rounds; Redis cells: %v warm-up, %v measured, callers %v; run took %s (estimated %s).\n\n",
		c.count, c.warmup, c.redisTime, c.callers, c.elapsed.Round(time.Second), c.estimate.Round(time.Second))
	if c.order["memory"] != nil {
		c.printMemory(w)
	}
	for _, msg := range c.skipped {
		fmt.Fprintf(w, "%s\n\n", msg)
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

func ratio(v, base float64, ok bool) string {
	if !ok || base == 0 {
		return ""
	}
	return fmt.Sprintf("%.2f×", v/base)
}

func (c *comparison) printFloors(w io.Writer) {
	fmt.Fprintf(w, "## Floors: redis-benchmark on the same server\n\n")
	fmt.Fprintf(w, "`redis-benchmark -c 64 -r KEYS` (keys `rb:{__rand_int__}` + the algorithm's suffix, KEYS the workload's), requests per second; limitkit's scripts get the ARGV of a take at a fixed time (deny-heavy: every key spent first). Server µs per call is INFO commandstats' usec/calls of that command during the -P 16 run.\n\n")
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
