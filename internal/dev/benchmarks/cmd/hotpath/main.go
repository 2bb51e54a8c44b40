// Command hotpath measures the in-memory decision path against the peer
// most services would write first, a map of golang.org/x/time/rate
// limiters under one mutex, in CPU time per decision as well as wall time,
// so that a machine shared with other work still gives usable ratios.
//
//	cd internal/dev/benchmarks && go run ./cmd/hotpath [-rounds 5] [-n 200000]
//
// Each round runs every contender once, in an order rotated by round, for
// -n decisions over the workload's keys (a bounded count): serially on one
// locked thread, whose CPU time (CLOCK_THREAD_CPUTIME_ID) excludes the
// time the thread waited for a core, and with -goroutines callers, whose
// process CPU time is divided by the decisions. Figures are medians over
// rounds; ratios (peer ÷ limitkit, above 1 means limitkit is cheaper) are
// medians of each round's ratio. The load average is printed beside them.
//
// Under valgrind (--tool=cachegrind --cache-sim=no) with -run naming one
// contender, two values of -n give its instructions per decision, which no
// other load moves: (Ir(n2) - Ir(n1)) / (2 * rounds * (n2 - n1)). Run it
// with GOMAXPROCS=1 GOGC=off: idle Ps spinning under valgrind's one thread
// add millions of instructions that differ from run to run.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/internal/dev/benchmarks"
)

func main() {
	rounds := flag.Int("rounds", 5, "rounds (medians over them; at least 3 for published figures)")
	n := flag.Int("n", 200_000, "decisions per contender per round and mode")
	goroutines := flag.Int("goroutines", 2, "callers of the parallel mode")
	only := flag.String("run", "", "only contenders whose name matches this regular expression")
	workloads := flag.String("workloads", "deny,never", "workloads, comma-separated: deny (100 per minute, every key spent), never (never-deny)")
	flag.Parse()
	filter, err := regexp.Compile(*only)
	if err != nil || *rounds < 1 || *n < 1 || *goroutines < 1 {
		fmt.Fprintln(os.Stderr, "hotpath: -rounds, -n and -goroutines must be at least 1, -run a regular expression")
		os.Exit(2)
	}
	known := map[string]benchmarks.Workload{
		"deny":  {Keys: 10_000, Deny: true, Limit: 100, Window: time.Minute},
		"never": {Keys: 10_000},
	}
	for _, name := range strings.Split(*workloads, ",") {
		w, ok := known[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "hotpath: -workloads: unknown %q; give deny, never or both\n", name)
			os.Exit(2)
		}
		if err := run(w, filter, *rounds, *n, *goroutines); err != nil {
			fmt.Fprintln(os.Stderr, "hotpath:", err)
			os.Exit(1)
		}
	}
}

// contender is one decider set up for a workload.
type contender struct {
	name    string
	decide  benchmarks.Decider
	release func()
	// cpu and wall are ns per decision, per round, by mode.
	cpu, wall [2][]float64
}

// peerName is the contender the ratios divide by.
const peerName = "x/time/rate (map+mutex)"

// selected are the algorithms the goals name.
var selected = []algorithms.Name{algorithms.FixedWindow, algorithms.SlidingCounter, algorithms.GCRA, algorithms.SlidingLog}

func run(w benchmarks.Workload, filter *regexp.Regexp, rounds, n, goroutines int) error {
	var cs []*contender
	defer func() {
		for _, c := range cs {
			c.release()
		}
	}()
	for _, ct := range benchmarks.MemoryContenders() {
		if ct.Name != peerName && !(ct.Group == "limitkit" && strings.HasPrefix(ct.Name, "limitkit limiter ") && slices.Contains(selected, ct.Algorithm)) ||
			!filter.MatchString(ct.Name) {
			continue
		}
		d, release, err := ct.New(w)
		if err != nil {
			return fmt.Errorf("%s: %w", ct.Name, err)
		}
		c := &contender{name: ct.Name, decide: d, release: release}
		cs = append(cs, c)
		if err := warm(c, w); err != nil {
			return err
		}
	}
	ids := w.IDs()
	for r := range rounds {
		for i := range cs {
			c := cs[(i+r)%len(cs)]
			for mode := range 2 {
				callers := 1
				if mode == 1 {
					callers = goroutines
				}
				cpu, wall, err := measure(c.decide, ids, n, callers, uint64(r))
				if err != nil {
					return fmt.Errorf("%s: %w", c.name, err)
				}
				c.cpu[mode] = append(c.cpu[mode], cpu)
				c.wall[mode] = append(c.wall[mode], wall)
			}
		}
	}
	report(w, cs, rounds, goroutines)
	return nil
}

// warm spends a deny-heavy workload's allowance on every key, so that the
// rounds measure its steady state (nearly every request denied), and
// touches every key of a never-deny one.
func warm(c *contender, w benchmarks.Workload) error {
	per := int64(1)
	if w.Deny {
		per, _ = w.DenyRule()
	}
	ctx := context.Background()
	for _, id := range w.IDs() {
		for range per {
			if _, err := c.decide(ctx, id); err != nil {
				return fmt.Errorf("%s: warm-up: %w", c.name, err)
			}
		}
	}
	return nil
}

// measure runs n decisions over ids with callers goroutines and returns CPU
// ns and wall ns per decision: the calling thread's CPU time for one
// caller, the process's for more.
func measure(decide benchmarks.Decider, ids []string, n, callers int, seed uint64) (cpu, wall float64, err error) {
	ctx := context.Background()
	var failed error
	var mu sync.Mutex
	loop := func(g int, count int) {
		x := seed*0x9e3779b97f4a7c15 + uint64(g+1)*0xbf58476d1ce4e5b9
		for range count {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			if _, err := decide(ctx, ids[x%uint64(len(ids))]); err != nil {
				mu.Lock()
				failed = err
				mu.Unlock()
				return
			}
		}
	}
	runtime.GC()
	if callers == 1 {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		c0, t0 := cpuNow(threadCPU), time.Now()
		loop(0, n)
		c1, t1 := cpuNow(threadCPU), time.Now()
		return float64(c1-c0) / float64(n), float64(t1.Sub(t0).Nanoseconds()) / float64(n), failed
	}
	var wg sync.WaitGroup
	c0, t0 := cpuNow(processCPU), time.Now()
	for g := range callers {
		wg.Go(func() { loop(g, n/callers) })
	}
	wg.Wait()
	c1, t1 := cpuNow(processCPU), time.Now()
	total := float64(n / callers * callers)
	return float64(c1-c0) / total, float64(t1.Sub(t0).Nanoseconds()) / total, failed
}

// The clocks of clock_gettime(2).
const (
	processCPU = 2 // CLOCK_PROCESS_CPUTIME_ID
	threadCPU  = 3 // CLOCK_THREAD_CPUTIME_ID
)

// cpuNow reads a CPU-time clock, in ns.
func cpuNow(clk uintptr) int64 {
	var ts syscall.Timespec
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clk, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		panic(fmt.Sprintf("clock_gettime(%d): %v", clk, errno))
	}
	return ts.Nano()
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// ratios returns the median over rounds of peer ÷ c, and the range.
func ratios(peer, c []float64) (med, lo, hi float64) {
	r := make([]float64, len(c))
	for i := range c {
		r[i] = peer[i] / c[i]
	}
	return median(r), slices.Min(r), slices.Max(r)
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

func report(w benchmarks.Workload, cs []*contender, rounds, goroutines int) {
	peer := cs[len(cs)-1] // the peer when selected, listed last; else ratios to the last
	for _, c := range cs {
		if c.name == peerName {
			peer = c
		}
	}
	limit, window := w.DenyRule()
	desc := "never-deny"
	if w.Deny {
		desc = fmt.Sprintf("%d per %v, every key spent", limit, window)
	}
	fmt.Printf("\n%d keys, %s; %d rounds, %s, GOMAXPROCS=%d; load average after: %s\n\n", w.Keys, desc, rounds, runtime.Version(), runtime.GOMAXPROCS(0), loadavg())
	fmt.Printf("| contender | serial CPU ns | serial wall ns | %d goroutines CPU ns | %d goroutines wall ns | ratio serial CPU (range) | ratio %d goroutines CPU (range) |\n", goroutines, goroutines, goroutines)
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, c := range cs {
		r := [2]string{"", ""}
		for mode := range 2 {
			med, lo, hi := ratios(peer.cpu[mode], c.cpu[mode])
			r[mode] = fmt.Sprintf("%.2f× (%.2f–%.2f)", med, lo, hi)
		}
		fmt.Printf("| %s | %.0f | %.0f | %.0f | %.0f | %s | %s |\n", c.name, median(c.cpu[0]), median(c.wall[0]), median(c.cpu[1]), median(c.wall[1]), r[0], r[1])
	}
}
