package rlsbench

import (
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/limitkit/limitkit/algorithms"
)

// Targets of issue 24: limitkit's per-decision Redis CPU over the
// reference algorithm's on the same client, and the p99 bound.
var Targets = map[algorithms.Name]float64{algorithms.FixedWindow: 1.0, algorithms.SlidingLog: 1.5}

// P99Bound is Envoy's default timeout of the rate limit call; p99 should
// stay well under it.
const P99Bound = 20 * time.Millisecond

// median returns the median of vs (the mean of the middle two when even).
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Ratio is a median of per-round ratios with their range.
type Ratio struct {
	Median, Min, Max float64
	// OK is false when some round had no value (a zero denominator).
	OK bool
}

func (r Ratio) String() string {
	if !r.OK {
		return "n/a"
	}
	return fmt.Sprintf("%.2f (%.2f–%.2f)", r.Median, r.Min, r.Max)
}

// find returns the index of the cell of name under n descriptors, or -1.
func (res *Results) find(name string, n int) int {
	for i, c := range res.Cells {
		if c.Contender.Name == name && c.Descriptors == n {
			return i
		}
	}
	return -1
}

// Ratio returns, per round, metric of cell a over metric of cell b (both
// measured in that round), as a median with its range.
func (res *Results) Ratio(a, b int, metric func(Sample) float64) Ratio {
	if a < 0 || b < 0 {
		return Ratio{}
	}
	var rs []float64
	for r := range res.Options.Rounds {
		den := metric(res.Samples[b][r])
		if den == 0 {
			return Ratio{}
		}
		rs = append(rs, metric(res.Samples[a][r])/den)
	}
	return Ratio{Median: median(rs), Min: slices.Min(rs), Max: slices.Max(rs), OK: true}
}

// Median returns the median over rounds of metric of cell i.
func (res *Results) Median(i int, metric func(Sample) float64) float64 {
	vs := make([]float64, len(res.Samples[i]))
	for r, s := range res.Samples[i] {
		vs[r] = metric(s)
	}
	return median(vs)
}

// Metrics of a sample.
var (
	rate       = func(s Sample) float64 { return s.Rate() }
	p50        = func(s Sample) float64 { return float64(s.P50) }
	p99        = func(s Sample) float64 { return float64(s.P99) }
	serverCPU  = func(s Sample) float64 { return s.Per(float64(s.ServerCPU) / 1e3) }
	commands   = func(s Sample) float64 { return s.Per(float64(s.Commands)) }
	processCPU = func(s Sample) float64 { return s.Per(float64(s.ProcessCPU) / 1e3) }
	denied     = func(s Sample) float64 { return float64(s.Denied) }
)

// Write prints the run as markdown: a table per request shape, then the
// ratios the targets are about.
func (res *Results) Write(w io.Writer, header string) {
	o := res.Options
	fmt.Fprintf(w, "%s\n\nRun of %s, %v: %d round(s) of %v measured per cell after %v of warm-up, %d callers over one gRPC connection, "+
		"%d values per descriptor drawn uniformly, every rule %d per %s (never denies). Medians over rounds.\n\n",
		header, res.Started.UTC().Format("2006-01-02 15:04 MST"), res.Took.Round(time.Second), o.Rounds, o.Measure, o.Warmup, o.Callers,
		o.Keys, o.Spec.RequestsPerUnit, o.Spec.Unit)
	var worstP99 time.Duration
	var worstName string
	for _, n := range o.Descriptors {
		fmt.Fprintf(w, "### %d descriptor(s) per request\n\n", n)
		fmt.Fprintln(w, "| contender | decisions/s | p50 | p99 | Redis CPU µs/decision | Redis commands/decision | process CPU µs/decision | denied |")
		fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|")
		for i, c := range res.Cells {
			if c.Descriptors != n {
				continue
			}
			p := time.Duration(res.Median(i, p99))
			if p > worstP99 {
				worstP99, worstName = p, fmt.Sprintf("%s, %d descriptor(s)", c.Contender.Name, n)
			}
			redisCols := "– | –"
			if c.Contender.Redis() {
				redisCols = fmt.Sprintf("%.1f | %.2f", res.Median(i, serverCPU), res.Median(i, commands))
			}
			fmt.Fprintf(w, "| %s | %.0f | %s | %s | %s | %.1f | %.0f |\n", c.Contender.Name, res.Median(i, rate),
				fmtDur(res.Median(i, p50)), fmtDur(float64(p)), redisCols, res.Median(i, processCPU), res.Median(i, denied))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "### Ratios at %d callers (per-round ratios: median and range)\n\n", o.Callers)
	fmt.Fprintln(w, "Redis CPU per decision (by /proc) and decisions/s of each limitkit algorithm over the reference algorithm on the same client and request shape; "+
		"targets: fixed_window ≤ 1.00, sliding_log ≤ 1.50 in Redis CPU per decision.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| contender | descriptors | Redis CPU/decision over reference | decisions/s over reference | target |")
	fmt.Fprintln(w, "|---|--:|--:|--:|---|")
	for _, n := range o.Descriptors {
		for i, c := range res.Cells {
			if c.Descriptors != n || c.Contender.Group != GroupLimitkit || !c.Contender.Redis() {
				continue
			}
			ref := res.find(ReferenceName(c.Contender.Client), n)
			cpu := res.Ratio(i, ref, serverCPU)
			verdict := ""
			if t, ok := Targets[c.Contender.Algorithm]; ok && cpu.OK {
				verdict = fmt.Sprintf("≤ %.2f: ", t)
				if cpu.Median <= t {
					verdict += "met"
				} else {
					verdict += "missed"
				}
			}
			fmt.Fprintf(w, "| %s | %d | %s | %s | %s |\n", c.Contender.Name, n, cpu, res.Ratio(i, ref, rate), verdict)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Floors: the reference algorithm over its own Redis work from a plain client (pipelined INCRBY+EXPIRE, no gRPC), "+
		"and limitkit's fixed_window over one EVALSHA of `return 1` per request from a plain client.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| pair | descriptors | Redis CPU/decision | decisions/s |")
	fmt.Fprintln(w, "|---|--:|--:|--:|")
	for _, n := range o.Descriptors {
		for _, client := range []string{Rueidis, GoRedis} {
			pairs := [][2]string{{ReferenceName(client), FloorIncrName(client)},
				{LimitkitName(client, algorithms.FixedWindow), FloorEvalName(client)},
				{LimitkitName(client, algorithms.SlidingLog), FloorEvalName(client)}}
			for _, p := range pairs {
				a, b := res.find(p[0], n), res.find(p[1], n)
				if a < 0 || b < 0 {
					continue
				}
				fmt.Fprintf(w, "| %s / %s | %d | %s | %s |\n", p[0], p[1], n, res.Ratio(a, b, serverCPU), res.Ratio(a, b, rate))
			}
		}
	}
	fmt.Fprintln(w)
	if worstName != "" {
		fmt.Fprintf(w, "Highest p99 (median over rounds): %s (%s); target: well under %v (Envoy's default timeout).\n", fmtDur(float64(worstP99)), worstName, P99Bound)
	}
}

func fmtDur(ns float64) string { return fmt.Sprintf("%.2f ms", ns/1e6) }
