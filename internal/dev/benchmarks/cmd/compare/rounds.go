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
	"slices"
	"testing"
	"time"

	"github.com/limitkit/limitkit/internal/dev/benchmarks"
	"github.com/limitkit/limitkit/internal/dev/benchmarks/harness"
)

// sample is one measurement of one contender on one workload and mode.
type sample struct {
	round             int
	ns, allocs, bytes float64
	admitted, errors  float64
	// Redis only, per decision: the server's CPU time by /proc and by
	// INFO cpu (µs), the time its script calls took (commandstats usec),
	// the script calls and all commands it ran (those inside scripts
	// included); script calls per denied decision; over-admissions in the
	// cell (deny-heavy); this process's CPU (callers and client, µs).
	procUsec, infoUsec, scriptUsec, scriptCalls, calls float64
	clientUsec                                         float64
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

func (c *comparison) run() error {
	c.started = time.Now()
	c.samples = map[cellKey][]sample{}
	c.order = map[string][]benchmarks.Contender{}
	c.floors = map[floorKey][]benchmarks.FloorResult{}
	c.memWorkloads = benchmarks.Workloads()
	c.redisWorkloads = benchmarks.RedisWorkloads(c.warmup)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	memCells, err := c.memoryCells(ctx)
	defer closeCells(memCells)
	if err != nil {
		return err
	}
	srv, redisCells, floors, err := c.startRedis(ctx)
	if srv != nil {
		defer srv.Close()
	}
	if err != nil {
		return err
	}
	c.estimate = c.estimateRun(len(memCells), len(redisCells), len(floors))
	c.logf("estimated run time: %s (%d rounds: %d in-memory cells, %d Redis cells of %v warm-up + %v × %d caller counts, %d redis-benchmark runs)",
		c.estimate.Round(time.Second), c.count, len(memCells), len(redisCells), c.warmup, c.redisTime, len(c.callers), len(floors))
	if s := harness.Shortfall(c.count, c.redisTime); s != "" && len(redisCells) > 0 {
		c.logf("Redis cells: %s", s)
	}

	for rep := range c.count {
		if c.memory {
			if err := c.memoryRound(ctx, memCells, rep); err != nil {
				return err
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

// memoryCells prepares the in-memory cells of the contenders the filter
// selects (none without -memory), in c.order. The cells prepared are
// returned even with an error, for the caller to close.
func (c *comparison) memoryCells(ctx context.Context) ([]*benchmarks.Cell, error) {
	if !c.memory {
		return nil, nil
	}
	var cells []*benchmarks.Cell
	for _, ct := range benchmarks.MemoryContenders() {
		if !c.filter.MatchString(ct.Name) {
			continue
		}
		c.order["memory"] = append(c.order["memory"], ct)
		for _, w := range c.memWorkloads {
			cell, err := benchmarks.Prepare(ctx, ct, w)
			if err != nil {
				return cells, err
			}
			cells = append(cells, cell)
		}
	}
	return cells, nil
}

// closeCells closes cells, the last prepared first.
func closeCells(cells []*benchmarks.Cell) {
	for _, cell := range slices.Backward(cells) {
		cell.Close()
	}
}

// startRedis starts the Redis server of the Redis cells (none without
// -redis; a server that cannot start is noted in c.skipped) and returns
// it, its cells and the redis-benchmark floors. The server is returned
// even with an error, for the caller to close.
func (c *comparison) startRedis(ctx context.Context) (*harness.Server, []redisCell, []benchmarks.Floor, error) {
	if !c.redis {
		return nil, nil, nil, nil
	}
	srv, err := harness.StartServer()
	if err != nil {
		c.skipped = append(c.skipped, "Redis benchmarks skipped: "+err.Error())
		return nil, nil, nil, nil
	}
	c.redisVersion = srv.Version(ctx)
	for _, ct := range benchmarks.RedisContenders(srv.Addr()) {
		if c.filter.MatchString(ct.Name) {
			c.order["redis"] = append(c.order["redis"], ct)
		}
	}
	cells := c.redisCells()
	if !c.runFloors || (c.filter.String() != "" && !c.filter.MatchString("redis-benchmark")) {
		return srv, cells, nil, nil
	}
	if _, err := exec.LookPath("redis-benchmark"); err != nil {
		c.skipped = append(c.skipped, "redis-benchmark floors skipped: redis-benchmark not found on PATH (apt-get install redis-tools)")
		return srv, cells, nil, nil
	}
	floors, err := benchmarks.Floors(ctx, srv, time.Now().UnixMilli(), 64, c.redisWorkloads)
	return srv, cells, floors, err
}

// memoryRound measures every in-memory cell once, serial and parallel,
// starting at another cell each round.
func (c *comparison) memoryRound(ctx context.Context, cells []*benchmarks.Cell, rep int) error {
	if err := flag.Set("test.benchtime", c.memTime.String()); err != nil {
		return err
	}
	c.logf("round %d/%d: in memory, %d cells", rep+1, c.count, len(cells))
	for _, cell := range harness.Rotate(cells, rep, c.count) {
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
	return harness.Median(vs), true
}

// byRound returns f of the cell's sample of each round, 0 for a round
// without one.
func (c *comparison) byRound(k cellKey, f func(sample) float64) []float64 {
	vs := make([]float64, c.count)
	for _, s := range c.samples[k] {
		vs[s.round] = f(s)
	}
	return vs
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
	return harness.Median(vs), true
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
