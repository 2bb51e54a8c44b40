package rlsbench

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"time"

	"github.com/limitkit/limitkit/internal/dev/benchmarks/harness"
)

// Options set a run. The zero value of a field means its default.
type Options struct {
	// Rounds is the number of rounds (default 3); tables give medians.
	Rounds int
	// Measure is each cell's measured time (default 2s); Warmup the time
	// of the cell's own load before it, not measured (default 1s: a
	// window of the one-second rules, so logs hold their steady contents).
	Measure, Warmup time.Duration
	// Callers is the number of concurrent gRPC callers (default 64).
	Callers int
	// Keys is the number of distinct values per descriptor (default 10,000).
	Keys int
	// Descriptors lists the request shapes (default 1 and 3).
	Descriptors []int
	// Spec is every rule's limit (default 10,000 per second: the most a
	// sliding log accepts, which these loads never reach on one key), and
	// with Spec.Charge every request a charge.
	Spec Spec
	// Contenders are the contenders to run (see Contenders); Run keeps
	// those whose name matches Filter (nil keeps all).
	Contenders []Contender
	Filter     *regexp.Regexp
	// Server is the Redis server of the Redis contenders; nil leaves them
	// out.
	Server *harness.Server
	// Progress receives a line per cell (nil: none).
	Progress io.Writer
}

func (o *Options) defaults() {
	if o.Rounds <= 0 {
		o.Rounds = harness.DefaultRounds
	}
	if o.Measure <= 0 {
		o.Measure = harness.DefaultMeasured
	}
	if o.Warmup <= 0 {
		o.Warmup = harness.DefaultWarmup
	}
	if o.Callers <= 0 {
		o.Callers = 64
	}
	if o.Keys <= 0 {
		o.Keys = 10_000
	}
	if len(o.Descriptors) == 0 {
		o.Descriptors = []int{1, 3}
	}
	if o.Spec.Unit == "" && o.Spec.RequestsPerUnit == 0 {
		o.Spec.Unit, o.Spec.RequestsPerUnit = "second", 10_000
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

// Cell is one contender under one request shape.
type Cell struct {
	Contender   Contender
	Descriptors int
}

// Sample is one measured cell of one round: the drive, and what it cost
// (harness.Usage). The server's share (its CPU by /proc, ProcCPU; the
// commands it ran, Commands, scripts' inner commands included) is 0 for a
// contender without Redis; ProcessCPU is this Go process's CPU time
// (callers, gRPC client and server, service and Redis client together).
type Sample struct {
	Drive
	harness.Usage
}

// Rate is decisions per second.
func (s Sample) Rate() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Decisions) / s.Elapsed.Seconds()
}

// Per divides v by the sample's decisions.
func (s Sample) Per(v float64) float64 {
	if s.Decisions == 0 {
		return 0
	}
	return v / float64(s.Decisions)
}

// Results are the samples of a run: Samples[cell][round].
type Results struct {
	Options Options
	Cells   []Cell
	Samples [][]Sample
	// Started and Took time the run.
	Started time.Time
	Took    time.Duration
}

// cells returns the cells of o in list order: each contender kept, under
// each request shape.
func (o Options) cells() []Cell {
	var cells []Cell
	for _, n := range o.Descriptors {
		for _, c := range o.Contenders {
			if c.Redis() && o.Server == nil {
				continue
			}
			if o.Filter != nil && !o.Filter.MatchString(c.Name) {
				continue
			}
			cells = append(cells, Cell{Contender: c, Descriptors: n})
		}
	}
	return cells
}

// Estimate is how long a run of o takes, setup left out.
func (o Options) Estimate() time.Duration {
	o.defaults()
	return time.Duration(len(o.cells())*o.Rounds) * (o.Measure + o.Warmup)
}

// Run measures every cell in every round. Round r runs the cells in list
// order rotated by r/Rounds of the list (harness.Rotate), so a noisy
// moment does not fall on the same neighbours each round. A cell whose
// calls fail stops the run.
func Run(ctx context.Context, o Options) (*Results, error) {
	o.defaults()
	cells := o.cells()
	if len(cells) == 0 {
		return nil, fmt.Errorf("no contender to run; check -run")
	}
	res := &Results{Options: o, Cells: cells, Samples: make([][]Sample, len(cells)), Started: time.Now()}
	for i := range res.Samples {
		res.Samples[i] = make([]Sample, o.Rounds)
	}
	order := make([]int, len(cells))
	for i := range order {
		order[i] = i
	}
	for r := range o.Rounds {
		for _, i := range harness.Rotate(order, r, o.Rounds) {
			s, err := MeasureCell(ctx, cells[i], o)
			if err != nil {
				return nil, fmt.Errorf("round %d, %s, %d descriptors: %w", r+1, cells[i].Contender.Name, cells[i].Descriptors, err)
			}
			res.Samples[i][r] = s
			fmt.Fprintf(o.Progress, "round %d/%d  %-40s d=%d  %8.0f/s  p50 %v  p99 %v\n", r+1, o.Rounds,
				cells[i].Contender.Name, cells[i].Descriptors, s.Rate(), s.P50.Round(time.Microsecond), s.P99.Round(time.Microsecond))
		}
	}
	res.Took = time.Since(res.Started)
	return res, nil
}

// MeasureCell runs one cell: an empty server (FLUSHALL), the contender
// started afresh, the warm-up at full load, then the measured time with
// the server's counters read around it.
func MeasureCell(ctx context.Context, cell Cell, o Options) (Sample, error) {
	o.defaults()
	c := cell.Contender
	addr := ""
	if o.Server != nil {
		addr = o.Server.Addr()
		if err := o.Server.FlushAll(ctx); err != nil {
			return Sample{}, err
		}
	}
	call, closeC, err := c.Start(addr, o.Spec)
	if err != nil {
		return Sample{}, err
	}
	defer closeC()
	load := Load{Descriptors: cell.Descriptors, Keys: o.Keys, Callers: o.Callers, Hits: o.Spec.Charge}
	if w := DriveFor(ctx, call, load, o.Warmup); w.Errors > 0 {
		return Sample{}, fmt.Errorf("warm-up: %d of %d calls failed, first: %w", w.Errors, w.Decisions, w.FirstError)
	}
	var srv *harness.Server
	if c.Redis() {
		srv = o.Server
	}
	var d Drive
	u, err := harness.Measure(ctx, srv, func() { d = DriveFor(ctx, call, load, o.Measure) })
	if err != nil {
		return Sample{}, err
	}
	if d.Errors > 0 {
		return Sample{}, fmt.Errorf("%d of %d calls failed, first: %w", d.Errors, d.Decisions, d.FirstError)
	}
	return Sample{Drive: d, Usage: u}, nil
}
