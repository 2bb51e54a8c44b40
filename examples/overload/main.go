// Command overload shows what an adaptive concurrency limit is for. A
// simulated backend serves C requests at once at its base latency; past C
// its latency grows steeply (e^6 times the base at 2C), like a database
// thrashing. A load generator offers it 3×C over loopback HTTP, with a
// mix of classes (10% critical, 40% default, 50% sheddable) and a client
// deadline of 4× the base latency, while the capacity steps: C, then C/2,
// then C again. Three servers take the same load in turn:
//
//   - unprotected: every request reaches the backend;
//   - fixed: a concurrency limit of C (adaptive.Fixed), right until C
//     halves;
//   - adaptive: the limit follows latency (adaptive.Gradient2, or the
//     law -law names).
//
// For each phase it prints goodput (requests served within their deadline,
// against what the backend can serve), the p99 latency of admitted
// requests against the base latency, and the success of critical and
// sheddable requests; for the adaptive server, how long the limit took to
// settle within ±25% of the capacity after each step.
//
//	go run ./examples/overload                  # C=10, 100 ms, phases of 15 s
//	go run ./examples/overload -c 20 -base 50ms -d 9s
//	go run ./examples/overload -law vegas -servers adaptive -goals
//
// -goals checks the adaptive server against the goals of issue 39 and
// prints each with whether it was met; -trace prints the adaptive limit
// every 250 ms. It listens on 127.0.0.1 only and runs for -d per server.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

func main() {
	var s Setup
	flag.IntVar(&s.Capacity, "c", 10, "backend capacity C: requests served at once at the base latency")
	flag.DurationVar(&s.Base, "base", 100*time.Millisecond, "backend latency up to C in flight")
	flag.DurationVar(&s.Duration, "d", 45*time.Second, "run time per server (three phases: C, C/2, C)")
	flag.Float64Var(&s.Load, "load", 3, "offered load, in multiples of the capacity")
	flag.StringVar(&s.Law, "law", "gradient2", "the adaptive server's law: gradient2, vegas or aimd")
	flag.BoolVar(&s.P90, "p90", false, "gradient2 follows each window's p90 latency, not its mean")
	flag.BoolVar(&s.FallAtOnce, "fall-at-once", false, "gradient2 applies a fall unsmoothed")
	servers := flag.String("servers", "unprotected,fixed,adaptive", "the servers to run, in order")
	flag.BoolVar(&s.Goals, "goals", false, "check the adaptive server against issue 39's goals")
	flag.BoolVar(&s.Trace, "trace", false, "print the adaptive limit and the backend's in-flight every 250 ms")
	flag.Parse()
	s.Servers = strings.Split(*servers, ",")
	if err := run(os.Stdout, s); err != nil {
		fmt.Fprintln(os.Stderr, "overload:", err)
		os.Exit(1)
	}
}

// Setup is one comparison.
type Setup struct {
	Capacity int
	Base     time.Duration
	Duration time.Duration
	Load     float64
	Law      string   // the adaptive server's law; "" is gradient2
	Servers  []string // nil: unprotected, fixed, adaptive
	Goals    bool     // check the adaptive run against the goals
	// P90 and FallAtOnce are the adaptive server's Gradient2 options.
	P90, FallAtOnce bool
	Trace           bool // print the adaptive limit as it moves
}

func (s Setup) check() error {
	switch {
	case s.Capacity < 2:
		return errors.New("-c must be 2 or more")
	case s.Base < time.Millisecond || s.Duration < 3*s.Base || s.Load <= 0:
		return errors.New("-base must be at least 1ms, -d at least 3 × -base, -load positive")
	case s.Law != "" && s.Law != "gradient2" && s.Law != "vegas" && s.Law != "aimd":
		return fmt.Errorf("-law %q is unknown; use gradient2, vegas or aimd", s.Law)
	case float64(s.Capacity)*s.Load/s.Base.Seconds()*s.Duration.Seconds() > 200000:
		return errors.New("-c × -load / -base × -d asks for more than 200000 requests; lower one of them")
	}
	for _, m := range s.Servers {
		if !slices.Contains(modes, m) {
			return fmt.Errorf("-servers names %q; use unprotected, fixed and adaptive", m)
		}
	}
	return nil
}

var modes = []string{"unprotected", "fixed", "adaptive"}

func run(w io.Writer, s Setup) error {
	if err := s.check(); err != nil {
		return err
	}
	fmt.Fprintf(w, "backend: capacity C=%d at %v (%.0f req/s), offered %.1f×C, deadline %v; phases of %v: C, C/2, C\n\n",
		s.Capacity, s.Base, float64(s.Capacity)/s.Base.Seconds(), s.Load, 4*s.Base, s.Duration/3)
	fmt.Fprintf(w, "%-11s %-6s %9s %8s %9s %9s %9s %7s\n", "server", "phase", "goodput", "p99/base", "critical", "default", "sheddable", "limit")
	servers := s.Servers
	if len(servers) == 0 {
		servers = modes
	}
	reps := map[string]Report{}
	for _, mode := range servers {
		rep, err := Run(s, mode, w)
		if err != nil {
			return err
		}
		rep.print(w)
		reps[mode] = rep
	}
	if s.Goals {
		goals(w, reps)
	}
	return nil
}

// Phase is what one phase of a run measured.
type Phase struct {
	Capacity  int
	Offered   int
	Served    int     // answered 200 within the deadline
	Goodput   float64 // Served per second, against the capacity's rate
	P99       time.Duration
	P99Base   float64 // P99 over the base latency
	Critical  float64 // share of critical requests served
	Default   float64
	Sheddable float64
	LimitMin  int // the adaptive limit's range during the phase (0: none)
	LimitMax  int
	Settle    time.Duration // from the phase's start until the limit stayed within ±25% of Capacity; -1 never
}

// Report is one server's run.
type Report struct {
	Mode   string
	Phases []Phase
}

func (r Report) print(w io.Writer) {
	for i, p := range r.Phases {
		limit := "-"
		if p.LimitMax > 0 {
			limit = fmt.Sprintf("%d..%d", p.LimitMin, p.LimitMax)
		}
		fmt.Fprintf(w, "%-11s %-6s %8.0f%% %8.2f %8.1f%% %8.1f%% %8.1f%% %7s", r.Mode, fmt.Sprintf("%d:C=%d", i+1, p.Capacity),
			100*p.Goodput, p.P99Base, 100*p.Critical, 100*p.Default, 100*p.Sheddable, limit)
		if p.LimitMax > 0 && i > 0 {
			if p.Settle < 0 {
				fmt.Fprintf(w, "  never settled within ±25%% of C")
			} else {
				fmt.Fprintf(w, "  settled within ±25%% of C in %v", p.Settle.Round(10*time.Millisecond))
			}
		}
		fmt.Fprintln(w)
	}
}
