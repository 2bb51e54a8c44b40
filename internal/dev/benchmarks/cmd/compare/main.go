// Command compare runs the whole comparison of limitkit with its peers and
// with the limits of the machine, in one process, and prints it as
// markdown tables with ratios.
//
//	cd internal/dev/benchmarks && go run ./cmd/compare [-count 3] [-o results.md]
//	cd internal/dev/benchmarks && go run ./cmd/compare -quick   # smoke run, under 2 minutes
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
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limitkit/limitkit/internal/dev/benchmarks/harness"
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
	count := fs.Int("count", harness.DefaultRounds, "rounds; tables show medians (at least 3 for published figures)")
	memTime := fs.Duration("memtime", 30*time.Millisecond, "target duration of each in-memory benchmark")
	redisTime := fs.Duration("redistime", harness.DefaultMeasured, "measured duration of each Redis cell, after its warm-up")
	warmup := fs.Duration("warmup", harness.DefaultWarmup, "warm-up of each Redis cell, and the window of the never-deny logs")
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
		if err := harness.SetUnset(fs, map[string]string{"count": "1", "memtime": "5ms", "redistime": "150ms", "warmup": "150ms", "floorrequests": "4000"}); err != nil {
			return config{}, err
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
