// Command rlsbench measures the Envoy rate limit service of package rls
// beside the reference server's algorithm and the Redis floors, and
// prints markdown tables of medians and ratios (see package rlsbench).
//
//	cd internal/dev/benchmarks && go run ./cmd/rlsbench -o results.md
//	cd internal/dev/benchmarks && go run ./cmd/rlsbench -quick   # smoke run
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/internal/dev/benchmarks/harness"
	"github.com/limitkit/limitkit/internal/dev/benchmarks/rlsbench"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "rlsbench:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		quick   = flag.Bool("quick", false, "smoke run: 1 round, 300ms warm-up, 500ms cells, fixed_window and sliding_log (flags given explicitly win)")
		rounds  = flag.Int("count", harness.DefaultRounds, "rounds; tables give medians")
		measure = flag.Duration("time", harness.DefaultMeasured, "measured time per cell")
		warmup  = flag.Duration("warmup", harness.DefaultWarmup, "warm-up per cell, not measured (at least the rules' 1s window for steady logs)")
		callers = flag.Int("callers", 64, "concurrent gRPC callers")
		keys    = flag.Int("keys", 10_000, "distinct values per descriptor")
		descs   = flag.String("descriptors", "1,3", "request shapes: descriptors per request, comma-separated (1 to 3)")
		algs    = flag.String("algorithms", "", "limitkit algorithms, comma-separated (default every rate algorithm)")
		filter  = flag.String("run", "", "keep only contenders whose name matches this regexp")
		noRedis = flag.Bool("noredis", false, "leave out every contender on Redis")
		charge  = flag.Uint("charge", 0, "when above 0, every request is a charge of this many hits (hits_addend) on a domain charged after the response (issue 38)")
		out     = flag.String("o", "", "also write the tables to this file")
	)
	flag.Parse()
	if *quick {
		if err := harness.SetUnset(flag.CommandLine, map[string]string{"count": "1", "time": "500ms", "warmup": "300ms", "algorithms": "fixed_window,sliding_log"}); err != nil {
			return err
		}
	}
	if *charge > 1<<31 {
		return fmt.Errorf("-charge %d: write at most %d hits", *charge, 1<<31)
	}
	o := rlsbench.Options{Rounds: *rounds, Measure: *measure, Warmup: *warmup, Callers: *callers, Keys: *keys, Progress: os.Stderr,
		Spec: rlsbench.Spec{Charge: uint32(*charge)}}
	for f := range strings.SplitSeq(*descs, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > len(rlsbench.DescriptorKeys) {
			return fmt.Errorf("-descriptors %q: write numbers from 1 to %d, comma-separated", *descs, len(rlsbench.DescriptorKeys))
		}
		o.Descriptors = append(o.Descriptors, n)
	}
	names, err := algorithmList(*algs)
	if err != nil {
		return err
	}
	o.Contenders = rlsbench.Contenders(names)
	if *filter != "" {
		if o.Filter, err = regexp.Compile(*filter); err != nil {
			return fmt.Errorf("-run: %w", err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if !*noRedis {
		srv, err := harness.StartServer()
		if err != nil {
			return fmt.Errorf("%w (or run with -noredis)", err)
		}
		defer srv.Close()
		o.Server = srv
		fmt.Fprintf(os.Stderr, "redis-server %s on %s\n", srv.Version(ctx), srv.Addr())
	}
	fmt.Fprintf(os.Stderr, "about %v of measuring and warm-up, plus setup\n", o.Estimate().Round(time.Second))
	if s := harness.Shortfall(*rounds, *measure); s != "" {
		fmt.Fprintln(os.Stderr, s)
	}
	res, err := rlsbench.Run(ctx, o)
	if err != nil {
		return err
	}
	var b strings.Builder
	res.Write(&b, "## Rate limit service benchmark")
	fmt.Print(b.String())
	if *out != "" {
		return os.WriteFile(*out, []byte(b.String()), 0o644)
	}
	return nil
}

// algorithmList parses -algorithms; empty means every rate algorithm.
func algorithmList(s string) ([]algorithms.Name, error) {
	if s == "" {
		return rlsbench.RateAlgorithms(), nil
	}
	var names []algorithms.Name
	for f := range strings.SplitSeq(s, ",") {
		a := algorithms.Lookup(algorithms.Name(strings.TrimSpace(f)))
		if a == nil || a.HoldsLeases() {
			return nil, fmt.Errorf("-algorithms: %q is not a rate algorithm; write names of %v", f, algorithms.Names())
		}
		names = append(names, a.Name)
	}
	return names, nil
}
