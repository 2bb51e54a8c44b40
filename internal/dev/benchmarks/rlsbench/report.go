package rlsbench

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/internal/dev/benchmarks/harness"
)

// Targets of issue 24: limitkit's per-decision Redis CPU over the
// reference algorithm's on the same client, and the p99 bound.
var Targets = map[algorithms.Name]float64{algorithms.FixedWindow: 1.0, algorithms.SlidingLog: 1.5}

// P99Bound is Envoy's default timeout of the rate limit call; p99 should
// stay well under it.
const P99Bound = 20 * time.Millisecond

// fmtRatio writes a ratio as its median and range, "n/a" when a round had
// no value (a zero denominator).
func fmtRatio(r harness.Ratio) string {
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

// byRound returns metric of cell i in each round.
func (res *Results) byRound(i int, metric func(Sample) float64) []float64 {
	vs := make([]float64, len(res.Samples[i]))
	for r, s := range res.Samples[i] {
		vs[r] = metric(s)
	}
	return vs
}

// Ratio returns, per round, metric of cell a over metric of cell b (both
// measured in that round), as a median with its range.
func (res *Results) Ratio(a, b int, metric func(Sample) float64) harness.Ratio {
	if a < 0 || b < 0 {
		return harness.Ratio{}
	}
	return harness.RatioOf(res.byRound(a, metric), res.byRound(b, metric))
}

// Median returns the median over rounds of metric of cell i.
func (res *Results) Median(i int, metric func(Sample) float64) float64 {
	return harness.Median(res.byRound(i, metric))
}

// Metrics of a sample.
var (
	rate       = func(s Sample) float64 { return s.Rate() }
	p50        = func(s Sample) float64 { return float64(s.P50) }
	p99        = func(s Sample) float64 { return float64(s.P99) }
	serverCPU  = func(s Sample) float64 { return s.Per(float64(s.ProcCPU) / 1e3) }
	commands   = func(s Sample) float64 { return s.Per(float64(s.Commands)) }
	processCPU = func(s Sample) float64 { return s.Per(float64(s.ProcessCPU) / 1e3) }
	denied     = func(s Sample) float64 { return float64(s.Denied) }
)

// Write prints the run as markdown: a table per request shape, then the
// ratios the targets are about.
func (res *Results) Write(w io.Writer, header string) {
	o := res.Options
	fmt.Fprintf(w, "%s\n\nRun of %s, %v: %d round(s) of %v measured per cell after %v of warm-up, %d callers over one gRPC connection, "+
		"%d values per descriptor drawn uniformly, every rule %d per %s (never denies)%s. Medians over rounds.\n\n",
		header, res.Started.UTC().Format("2006-01-02 15:04 MST"), res.Took.Round(time.Second), o.Rounds, o.Measure, o.Warmup, o.Callers,
		o.Keys, o.Spec.RequestsPerUnit, o.Spec.Unit, chargeNote(o.Spec))
	var worstP99 time.Duration
	var worstName string
	for _, n := range o.Descriptors {
		fmt.Fprintf(w, "### %d descriptor(s) per request\n\n", n)
		var rows [][]string
		for i, c := range res.Cells {
			if c.Descriptors != n {
				continue
			}
			p := time.Duration(res.Median(i, p99))
			if p > worstP99 {
				worstP99, worstName = p, fmt.Sprintf("%s, %d descriptor(s)", c.Contender.Name, n)
			}
			cpu, cmds := "–", "–"
			if c.Contender.Redis() {
				cpu, cmds = fmt.Sprintf("%.1f", res.Median(i, serverCPU)), fmt.Sprintf("%.2f", res.Median(i, commands))
			}
			rows = append(rows, []string{c.Contender.Name, fmt.Sprintf("%.0f", res.Median(i, rate)),
				fmtDur(res.Median(i, p50)), fmtDur(float64(p)), cpu, cmds,
				fmt.Sprintf("%.1f", res.Median(i, processCPU)), fmt.Sprintf("%.0f", res.Median(i, denied))})
		}
		harness.WriteTable(w, "-rrrrrrr", []string{"contender", "decisions/s", "p50", "p99", "Redis CPU µs/decision",
			"Redis commands/decision", "process CPU µs/decision", "denied"}, rows)
	}
	fmt.Fprintf(w, "### Ratios at %d callers (per-round ratios: median and range)\n\n", o.Callers)
	fmt.Fprintln(w, "Redis CPU per decision (by /proc) and decisions/s of each limitkit algorithm over the reference algorithm on the same client and request shape; "+
		"targets: fixed_window ≤ 1.00, sliding_log ≤ 1.50 in Redis CPU per decision.")
	fmt.Fprintln(w)
	var rows [][]string
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
			rows = append(rows, []string{c.Contender.Name, strconv.Itoa(n), fmtRatio(cpu), fmtRatio(res.Ratio(i, ref, rate)), verdict})
		}
	}
	harness.WriteTable(w, "-rrr-", []string{"contender", "descriptors", "Redis CPU/decision over reference", "decisions/s over reference", "target"}, rows)
	fmt.Fprintln(w, "Floors: the reference algorithm over its own Redis work from a plain client (pipelined INCRBY+EXPIRE, no gRPC), "+
		"and limitkit's fixed_window over one EVALSHA of `return 1` per request from a plain client.")
	fmt.Fprintln(w)
	rows = nil
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
				rows = append(rows, []string{p[0] + " / " + p[1], strconv.Itoa(n), fmtRatio(res.Ratio(a, b, serverCPU)), fmtRatio(res.Ratio(a, b, rate))})
			}
		}
	}
	harness.WriteTable(w, "-rrr", []string{"pair", "descriptors", "Redis CPU/decision", "decisions/s"}, rows)
	if worstName != "" {
		fmt.Fprintf(w, "Highest p99 (median over rounds): %s (%s); target: well under %v (Envoy's default timeout).\n", fmtDur(float64(worstP99)), worstName, P99Bound)
	}
}

func fmtDur(ns float64) string { return fmt.Sprintf("%.2f ms", ns/1e6) }

// chargeNote describes spec's charges for the run's header, or "".
func chargeNote(spec Spec) string {
	if spec.Charge == 0 {
		return ""
	}
	return fmt.Sprintf("; every request a charge of %d hits (hits_addend) on a domain limitkit charges after the response (LIMITKIT_CHARGED_DOMAINS)", spec.Charge)
}
