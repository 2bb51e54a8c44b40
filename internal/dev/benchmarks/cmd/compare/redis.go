package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/internal/dev/benchmarks"
	"github.com/limitkit/limitkit/internal/dev/benchmarks/harness"
)

// redisCell is one contender on one Redis workload.
type redisCell struct {
	ct benchmarks.Contender
	w  benchmarks.Workload
}

// redisCells lists the Redis cells of a round in their first-round order:
// every contender on every Redis workload, except the floors on the
// deny-heavy one (a floor does not depend on the limit).
func (c *comparison) redisCells() []redisCell {
	var cells []redisCell
	for _, w := range c.redisWorkloads {
		for _, ct := range c.order["redis"] {
			if ct.Group == "floor" && w.Deny {
				continue
			}
			cells = append(cells, redisCell{ct, w})
		}
	}
	return cells
}

// lastCallers is the mode of the ratios: the largest caller count, last.
func (c *comparison) lastCallers() string { return "c=" + strconv.Itoa(c.callers[len(c.callers)-1]) }

// redisRound runs every Redis cell once, in the round's rotated order:
// on an emptied server, a new client, the warm-up, then each caller count.
func (c *comparison) redisRound(ctx context.Context, srv *harness.Server, cells []redisCell, rep int) error {
	c.logf("round %d/%d: Redis, %d cells", rep+1, c.count, len(cells))
	warmCallers := c.callers[len(c.callers)-1]
	for _, rc := range harness.Rotate(cells, rep, c.count) {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := srv.FlushAll(ctx); err != nil {
			return err
		}
		cell, err := benchmarks.Prepare(ctx, rc.ct, rc.w)
		if err != nil {
			return err
		}
		if err := benchmarks.Warm(ctx, cell, warmCallers, c.warmup); err != nil {
			cell.Close()
			return err
		}
		for _, callers := range c.callers {
			m, err := benchmarks.MeasureRedis(ctx, cell, srv, callers, c.redisTime)
			if err != nil {
				cell.Close()
				return err
			}
			n := float64(m.Decisions)
			denied := m.Decisions - m.Admitted - m.Errors
			s := sample{
				round:       rep,
				ns:          float64(m.Elapsed.Nanoseconds()) / n,
				allocs:      float64(m.Mallocs) / n,
				bytes:       float64(m.Bytes) / n,
				admitted:    float64(m.Admitted) / n,
				errors:      float64(m.Errors) / n,
				procUsec:    float64(m.ProcCPU.Microseconds()) / n,
				infoUsec:    float64(m.InfoCPU.Microseconds()) / n,
				scriptUsec:  float64(m.ScriptUsec) / n,
				scriptCalls: float64(m.ScriptCalls) / n,
				calls:       float64(m.Commands) / n,
				clientUsec:  float64(m.ProcessCPU.Microseconds()) / n,
			}
			if denied > 0 {
				s.callsPerDenied = float64(m.ScriptCalls) / float64(denied)
			}
			c.add(cellKey{"redis", rc.ct.Name, rc.w.String(), "c=" + strconv.Itoa(callers)}, s)
		}
		if rc.w.Deny {
			// Over-admissions are the cell's, warm-up included: record
			// them on the sample of the last caller count.
			k := cellKey{"redis", rc.ct.Name, rc.w.String(), c.lastCallers()}
			ss := c.samples[k]
			ss[len(ss)-1].over = float64(cell.OverAdmissions(rc.ct.Algorithm == algorithms.FixedWindow || rc.ct.Aligned))
		}
		cell.Close()
	}
	return nil
}

// floorRound runs the redis-benchmark floors once.
func (c *comparison) floorRound(ctx context.Context, srv *harness.Server, floors []benchmarks.Floor, rep int) error {
	if len(floors) == 0 {
		return nil
	}
	c.logf("round %d/%d: redis-benchmark, %d runs", rep+1, c.count, len(floors))
	for _, f := range harness.Rotate(floors, rep, c.count) {
		f.Requests = c.floorRequests
		if f.Pipeline == 1 {
			f.Requests = max(1, c.floorRequests/4)
		}
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

func procUs(s sample) float64    { return s.procUsec }
func clientUs(s sample) float64  { return s.clientUsec }
func infoUs(s sample) float64    { return s.infoUsec }
func perDenied(s sample) float64 { return s.callsPerDenied }
func scriptCl(s sample) float64  { return s.scriptCalls }
func over(s sample) float64      { return s.over }

// workloadTitle describes a Redis workload's limit.
func (c *comparison) workloadTitle(wl benchmarks.Workload) string {
	if wl.Deny {
		l, win := wl.DenyRule()
		return fmt.Sprintf("%s, deny-heavy (%d per %v, every key spent)", keysTitle(wl.Keys), l, win)
	}
	return fmt.Sprintf("%s, never-deny (logs: %d per %v)", keysTitle(wl.Keys), algorithms.MaxSlidingLogLimit, wl.LogWindow)
}

func (c *comparison) printRedis(w io.Writer) {
	fmt.Fprintf(w, "## Redis\n\n")
	fmt.Fprintf(w, "One redis-server on 127.0.0.1. Each cell, every round: FLUSHALL, a new client (go-redis: its pool of 10 per GOMAXPROCS dialled in full), %v of the cell's own workload at %d callers as warm-up (so logs hold their steady contents: their window is the warm-up's length; deny-heavy keys are spent), then %v measured at each caller count, goroutines sharing the client. Rounds rotate the order of the cells. Columns at %s: client allocations and bytes per decision (runtime.MemStats, whole process), the server's CPU per decision by /proc/PID/stat (10 ms resolution) and by INFO cpu, the server's time in script calls per decision (INFO commandstats usec of EVALSHA/EVAL; limitkit's stores send up to 16 concurrent decisions in one batch call), script calls per decision, all commands per decision (those inside scripts included) and this process's CPU per decision (callers and client together, by getrusage). Both clients run with their defaults (rueidis: auto-pipelining), as do limitkit's stores (batching on), except in the rows naming a setting (experiments). The seed script is the classic exact sliding log as one Lua script (benchmarks.SeedScript: ZREMRANGEBYSCORE, ZCARD, then ZADD and PEXPIRE when admitted) with sliding_log's limit. Floors: INCR and `EVALSHA %s` through the same clients.\n\n",
		c.warmup, c.callers[len(c.callers)-1], c.redisTime, c.lastCallers(), benchmarks.TrivialScript)
	last := c.lastCallers()
	for _, wl := range c.redisWorkloads {
		fmt.Fprintf(w, "### %s\n\n", c.workloadTitle(wl))
		header := []string{"contender"}
		for _, n := range c.callers {
			header = append(header, fmt.Sprintf("c=%d /s", n))
		}
		header = append(header, "allocs (B) /decision", "server CPU µs /decision (/proc)", "(INFO cpu)", "script µs /decision", "script calls /decision", "cmds /decision", "client CPU µs /decision")
		if wl.Deny {
			header = append(header, "script calls /denied", "over-admissions (max)")
		}
		var rows [][]string
		for _, ct := range c.order["redis"] {
			wk := wl
			if ct.Group == "floor" {
				wk = c.redisWorkloads[0]
			}
			k := cellKey{"redis", ct.Name, wk.String(), last}
			if _, ok := c.median(k, ns); !ok || (ct.Group == "floor" && wl.Deny) {
				continue
			}
			row := []string{ct.Name}
			for _, n := range c.callers {
				kn := cellKey{"redis", ct.Name, wk.String(), "c=" + strconv.Itoa(n)}
				v, ok := c.median(kn, perSecond)
				if !ok {
					row = append(row, "")
					continue
				}
				row = append(row, humanInt(int(math.Round(v)))+c.admittedNote(kn, wk))
			}
			a, _ := c.median(k, allocs)
			b, _ := c.median(k, bytesOp)
			pu, _ := c.median(k, procUs)
			iu, _ := c.median(k, infoUs)
			su, _ := c.median(k, scriptUs)
			sc, _ := c.median(k, scriptCl)
			cl, _ := c.median(k, calls)
			cu, _ := c.median(k, clientUs)
			row = append(row, fmt.Sprintf("%s (%.0f)", fmtAllocs(a), b), fmt.Sprintf("%.2f", pu), fmt.Sprintf("%.2f", iu),
				dash(su, "%.2f"), dash(sc, "%.3f"), fmt.Sprintf("%.2f", cl), fmt.Sprintf("%.2f", cu))
			if wl.Deny {
				pd, _ := c.median(k, perDenied)
				row = append(row, dash(pd, "%.3f"), fmt.Sprintf("%.0f", c.maxOf(k, over)))
			}
			rows = append(rows, row)
		}
		harness.WriteTable(w, "", header, rows)
	}
	if wl := c.redisWorkloads[len(c.redisWorkloads)-1]; wl.Deny {
		l, win := wl.DenyRule()
		fmt.Fprintf(w, "Over-admissions: admissions beyond %d per key, warm-up included, counted by the harness from the time each admitted call was made: per aligned window of %v for fixed_window, in the busiest interval of %v less 1 s of slack for the others (a cell lasts less than the window). Script calls per denied decision divide every script call of the cell by its denials.\n\n", l, win, win)
	}
	c.printRatios(w)
}

// maxOf returns the largest f over the cell's samples.
func (c *comparison) maxOf(k cellKey, f func(sample) float64) float64 {
	m := 0.0
	for _, s := range c.samples[k] {
		m = max(m, f(s))
	}
	return m
}

func dash(v float64, format string) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

// ratioCell returns a's decisions/s over b's as a harness.Ratio: the
// median of the per-round ratios, with their range (a pair measured in the
// same round shares that round's machine); empty when a round lacks one.
func (c *comparison) ratioCell(a, b cellKey) string {
	if len(c.samples[a]) == 0 {
		return ""
	}
	r := harness.RatioOf(c.byRound(a, perSecond), c.byRound(b, perSecond))
	switch {
	case !r.OK:
		return ""
	case r.Rounds < 2:
		return fmt.Sprintf("%.2f×", r.Median)
	}
	return fmt.Sprintf("%.2f× (%.2f–%.2f)", r.Median, r.Min, r.Max)
}

// printRatios prints every ratio the README quotes: each limitkit
// contender and the seed script against redis_rate, ulule, the seed script
// on the same client and the EVALSHA floor on the same client, with the
// server's CPU per decision next to that floor's.
func (c *comparison) printRatios(w io.Writer) {
	last := c.lastCallers()
	fmt.Fprintf(w, "### Ratios at %s callers\n\n", strings.TrimPrefix(last, "c="))
	fmt.Fprintf(w, "Decisions/s of the row over the column's, median of the per-round ratios (range over rounds). \"seed script\" and \"EVALSHA floor\" are those on the row's client. Server CPU per decision: /proc and commandstats script µs, the row's, then (after /) the `EVALSHA %s` floor's on the same client in the same run. The last columns: the row over redis-benchmark -c 64 running the same script with the same ARGV at a fixed time (-P 1, -P 16; limitkit only).\n\n", benchmarks.TrivialScript)
	floorOf := map[string]string{"rueidis": benchmarks.FloorRueidis, "go-redis": benchmarks.FloorGoRedis}
	seedOf := map[string]string{"rueidis": benchmarks.SeedRueidis, "go-redis": benchmarks.SeedGoRedis}
	for _, wl := range c.redisWorkloads {
		fmt.Fprintf(w, "#### %s\n\n", c.workloadTitle(wl))
		hasFloors := len(c.floorOrder) > 0
		header := []string{"contender", "vs " + benchmarks.RedisRate, "vs " + benchmarks.UluleRedis, "vs seed script", "vs EVALSHA floor",
			"server CPU µs /decision (/proc): row / floor", "script µs /decision: row / floor"}
		if hasFloors {
			header = append(header, "vs redis-benchmark -P 1", "vs redis-benchmark -P 16")
		}
		floorW := c.redisWorkloads[0].String()
		var rows [][]string
		for _, ct := range c.order["redis"] {
			if ct.Algorithm == "" && ct.Group != "seed" {
				continue
			}
			k := cellKey{"redis", ct.Name, wl.String(), last}
			if _, ok := c.median(k, ns); !ok {
				continue
			}
			fk := cellKey{"redis", floorOf[ct.Client], floorW, last}
			row := []string{ct.Name,
				c.ratioCell(k, cellKey{"redis", benchmarks.RedisRate, wl.String(), last}),
				c.ratioCell(k, cellKey{"redis", benchmarks.UluleRedis, wl.String(), last}),
				"",
				c.ratioCell(k, fk),
			}
			if ct.Group != "seed" {
				row[3] = c.ratioCell(k, cellKey{"redis", seedOf[ct.Client], wl.String(), last})
			}
			pu, _ := c.median(k, procUs)
			su, _ := c.median(k, scriptUs)
			fpu, fok := c.median(fk, procUs)
			fsu, _ := c.median(fk, scriptUs)
			if fok {
				row = append(row, fmt.Sprintf("%.2f / %.2f", pu, fpu), fmt.Sprintf("%.2f / %.2f", su, fsu))
			} else {
				row = append(row, fmt.Sprintf("%.2f", pu), fmt.Sprintf("%.2f", su))
			}
			if hasFloors {
				v, _ := c.median(k, perSecond)
				for _, pl := range []int{1, 16} {
					fv, ok := c.floorMedian(floorKey{string(ct.Algorithm), wl.String(), pl}, floorRPS)
					row = append(row, ratio(v, fv, ok && ct.Group == "limitkit"))
				}
			}
			rows = append(rows, row)
		}
		harness.WriteTable(w, "", header, rows)
	}
}
