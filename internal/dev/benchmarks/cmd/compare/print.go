package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/internal/dev/benchmarks"
	"github.com/limitkit/limitkit/internal/dev/benchmarks/harness"
)

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
		harness.WriteTable(w, "", header, rows)

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
		harness.WriteTable(w, "", header, rows)
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
	harness.WriteTable(w, "", header, rows)
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
