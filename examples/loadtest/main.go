// Command loadtest drives one limitkit limit as hard as it is told, for a
// bounded time, and reports what it saw: decisions per second, admitted and
// denied counts, latency percentiles and errors. Use it to size a Redis
// server (or check a client setting) for your own limits.
//
//	go run ./examples/loadtest                                   # in memory
//	go run ./examples/loadtest -redis redis://127.0.0.1:6379/0 -client rueidis \
//	    -algorithm sliding_log -limit 100 -window 1m -keys 10000 -c 64 -d 10s
//
// Each of -c goroutines calls limiter.Allow in a loop for a key drawn
// uniformly from -keys ids, until -d has passed. Without -redis the state
// is in process (backend/memorystore); with it, in the Redis server at that
// URL through the -client library. Every run uses a fresh key prefix, so
// it starts from empty keys and leaves keys that expire by themselves.
//
// The report ends with a check that no run can fail unless the limiter
// over-admits: admitted requests are at most limit × (windows the run
// touched + 1) × keys used.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/bits"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/storeurl"
	"github.com/limitkit/limitkit/limiter"
)

// config is what one run does.
type config struct {
	algorithm   algorithms.Name
	limit       int64
	window      time.Duration
	keys        int
	concurrency int
	duration    time.Duration
	redisURL    string
	client      string
	// timeout bounds each decision, so a stuck server cannot hold the
	// run; 0 sets no deadline (in memory, where a decision cannot hang).
	timeout time.Duration
}

func main() {
	var cfg config
	var alg string
	flag.StringVar(&alg, "algorithm", string(algorithms.SlidingLog), "algorithm: "+names())
	flag.Int64Var(&cfg.limit, "limit", 100, "requests admitted per window and key")
	flag.DurationVar(&cfg.window, "window", time.Minute, "window of the limit")
	flag.IntVar(&cfg.keys, "keys", 10_000, "number of distinct keys, drawn uniformly")
	flag.IntVar(&cfg.concurrency, "c", 64, "concurrent callers")
	flag.DurationVar(&cfg.duration, "d", 10*time.Second, "how long to run")
	flag.StringVar(&cfg.redisURL, "redis", "", "Redis URL (redis://host:port/db); empty keeps the state in memory")
	flag.StringVar(&cfg.client, "client", "go-redis", "Redis client library: go-redis or rueidis")
	flag.DurationVar(&cfg.timeout, "timeout", time.Second, "deadline of each decision on Redis")
	flag.Parse()
	cfg.algorithm = algorithms.Name(alg)
	if cfg.redisURL == "" {
		cfg.timeout = 0 // an in-memory decision cannot hang
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	store, where, closeStore, err := openStore(cfg.redisURL, cfg.client)
	if err == nil {
		defer closeStore()
		var rep report
		if rep, err = run(ctx, store, cfg); err == nil {
			rep.print(os.Stdout, cfg, where)
			if !rep.withinBound() {
				err = errors.New("admitted more than the limit allows")
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
}

// names lists the algorithms for the -algorithm flag's help.
func names() string {
	var ns []string
	for _, n := range algorithms.Names() {
		if !(algorithms.Rule{Algorithm: n}).HoldsLeases() {
			ns = append(ns, string(n))
		}
	}
	return strings.Join(ns, ", ")
}

// openStore returns the store to load, and where it keeps state.
func openStore(redisURL, client string) (backend.Store, string, func(), error) {
	if redisURL == "" {
		s, err := memorystore.New()
		return s, "in memory", func() {}, err
	}
	s, closeStore, err := openRedis(redisURL, client)
	return s, "in Redis (" + client + ")", closeStore, err
}

// validate checks what limiter.New does not: the load's own settings.
func (c config) validate() error {
	switch {
	case c.keys < 1:
		return fmt.Errorf("-keys is %d; it must be at least 1", c.keys)
	case c.concurrency < 1:
		return fmt.Errorf("-c is %d; it must be at least 1", c.concurrency)
	case c.duration <= 0:
		return fmt.Errorf("-d is %v; it must be positive", c.duration)
	case c.timeout < 0:
		return fmt.Errorf("-timeout is %v; it must not be negative", c.timeout)
	case (algorithms.Rule{Algorithm: c.algorithm}).HoldsLeases():
		return fmt.Errorf("-algorithm %s holds leases (Acquire and Release), not rate limits; load a rate-limiting algorithm", c.algorithm)
	}
	return nil
}

// report is what a run measured.
type report struct {
	start, end time.Time
	elapsed    time.Duration

	decisions, admitted, denied, errors int64
	// errorSamples holds the first few distinct error messages.
	errorSamples []string
	// latency of every decision, errors included.
	latency histogram
	// keysUsed is the number of distinct keys the run could have touched.
	keysUsed int64
	// bound is the most a correct limiter can admit in the run.
	bound int64
}

// withinBound reports whether the run admitted no more than bound.
func (r *report) withinBound() bool { return r.admitted <= r.bound }

// run drives store with cfg.concurrency callers for cfg.duration (or until
// ctx ends) and returns what they saw.
func run(ctx context.Context, store backend.Store, cfg config) (report, error) {
	if err := cfg.validate(); err != nil {
		return report{}, err
	}
	prefix := "loadtest:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	lim, err := limiter.New(store, limiter.Config{Algorithm: cfg.algorithm, Limit: cfg.limit, Window: cfg.window, Prefix: prefix})
	if err != nil {
		return report{}, err
	}
	ids := make([]string, cfg.keys)
	for i := range ids {
		ids[i] = "k" + strconv.Itoa(i)
	}

	var stopFlag atomic.Bool
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	timer := time.AfterFunc(cfg.duration, func() { stopFlag.Store(true) })
	defer timer.Stop()
	go func() {
		<-runCtx.Done()
		stopFlag.Store(true)
	}()

	type result struct {
		decisions, admitted, denied, errors int64
		errorSamples                        []string
		latency                             histogram
	}
	results := make([]result, cfg.concurrency)
	var wg sync.WaitGroup
	rep := report{start: time.Now()}
	for g := range results {
		wg.Go(func() {
			res := &results[g]
			rng := rand.New(rand.NewPCG(uint64(g), uint64(rep.start.UnixNano())))
			for !stopFlag.Load() {
				id := ids[rng.IntN(len(ids))]
				callCtx, cancelCall := runCtx, context.CancelFunc(func() {})
				if cfg.timeout > 0 {
					callCtx, cancelCall = context.WithTimeout(runCtx, cfg.timeout)
				}
				t0 := time.Now()
				d, err := lim.Allow(callCtx, id)
				res.latency.record(time.Since(t0))
				cancelCall()
				res.decisions++
				switch {
				case err != nil:
					if runCtx.Err() != nil && errors.Is(err, context.Canceled) {
						res.decisions-- // interrupted by the user, not a failure
						return
					}
					res.errors++
					if len(res.errorSamples) < 3 {
						res.errorSamples = append(res.errorSamples, err.Error())
					}
				case d.Allowed:
					res.admitted++
				default:
					res.denied++
				}
			}
		})
	}
	wg.Wait()
	rep.end = time.Now()
	rep.elapsed = rep.end.Sub(rep.start)
	seen := map[string]bool{}
	for i := range results {
		r := &results[i]
		rep.decisions += r.decisions
		rep.admitted += r.admitted
		rep.denied += r.denied
		rep.errors += r.errors
		rep.latency.merge(&r.latency)
		for _, e := range r.errorSamples {
			if !seen[e] && len(rep.errorSamples) < 3 {
				seen[e] = true
				rep.errorSamples = append(rep.errorSamples, e)
			}
		}
	}
	rep.keysUsed = min(int64(cfg.keys), rep.decisions)
	rep.bound = admissionBound(cfg.limit, cfg.window, rep.start, rep.end) * rep.keysUsed
	return rep, nil
}

// admissionBound is the most one key can admit between start and end:
// limit for each window of the epoch-aligned grid the run touched, plus one
// more limit. The counter algorithms never admit more than limit in one
// aligned window and the sliding log never more than limit in any window,
// so they stay at or below limit × windows; the extra limit leaves room for
// algorithms that allow a burst on top of their rate.
func admissionBound(limit int64, window time.Duration, start, end time.Time) int64 {
	w := window.Milliseconds()
	windows := end.UnixMilli()/w - start.UnixMilli()/w + 1
	return limit * (windows + 1)
}

// print writes the report, one "name: value" line per figure.
func (r *report) print(out io.Writer, cfg config, where string) {
	fmt.Fprintf(out, "limitkit loadtest: %s, limit %d per %v, %d keys, %d callers, %v, %s\n",
		cfg.algorithm, cfg.limit, cfg.window, cfg.keys, cfg.concurrency, cfg.duration, where)
	fmt.Fprintf(out, "elapsed:     %v\n", r.elapsed.Round(time.Millisecond))
	fmt.Fprintf(out, "decisions:   %d\n", r.decisions)
	fmt.Fprintf(out, "rate:        %.0f decisions/s\n", float64(r.decisions)/r.elapsed.Seconds())
	fmt.Fprintf(out, "admitted:    %d\n", r.admitted)
	fmt.Fprintf(out, "denied:      %d\n", r.denied)
	fmt.Fprintf(out, "errors:      %d\n", r.errors)
	for _, e := range r.errorSamples {
		fmt.Fprintf(out, "  error:     %s\n", e)
	}
	fmt.Fprintf(out, "latency:     p50 %v  p99 %v  p999 %v  max %v\n", round(r.latency.quantile(0.50)),
		round(r.latency.quantile(0.99)), round(r.latency.quantile(0.999)), round(r.latency.max))
	verdict := "ok"
	if !r.withinBound() {
		verdict = "OVER THE LIMIT"
	}
	fmt.Fprintf(out, "bound:       %d admitted, at most %d allowed (limit × (windows touched + 1) × %d keys): %s\n",
		r.admitted, r.bound, r.keysUsed, verdict)
}

// round keeps three significant digits or so of a latency for printing.
func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(time.Microsecond)
	case d >= time.Microsecond:
		return d.Round(100 * time.Nanosecond)
	}
	return d
}

// histogram counts durations in log-linear buckets: 16 per power of two,
// so a percentile is within 1/16 (6%) of the true value.
type histogram struct {
	counts [64 * subBuckets]int64
	total  int64
	max    time.Duration
}

const subBits = 4
const subBuckets = 1 << subBits

// bucketOf returns the bucket of a duration in ns: exact below 16 ns,
// then 16 buckets per power of two.
func bucketOf(ns uint64) int {
	if ns < subBuckets {
		return int(ns)
	}
	exp := bits.Len64(ns) - 1 - subBits // >= 0
	return (exp+1)*subBuckets + int(ns>>exp) - subBuckets
}

// upper returns the largest duration that falls in bucket i.
func upper(i int) time.Duration {
	if i < subBuckets {
		return time.Duration(i)
	}
	exp := i/subBuckets - 1
	mant := uint64(i%subBuckets + subBuckets)
	return time.Duration((mant+1)<<exp - 1)
}

// record adds one duration.
func (h *histogram) record(d time.Duration) {
	d = max(d, 0)
	h.counts[bucketOf(uint64(d))]++
	h.total++
	h.max = max(h.max, d)
}

// merge adds o's durations to h.
func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
	h.max = max(h.max, o.max)
}

// quantile returns the duration below which a share q of the recorded
// durations fall (its bucket's upper bound, never above max).
func (h *histogram) quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	rank := int64(q*float64(h.total) + 0.5)
	rank = max(rank, 1)
	var seen int64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(upper(i), h.max)
		}
	}
	return h.max
}

// openRedis opens the Redis at url (any URL backend/storeurl reads: one
// server, a cluster, Sentinel) through the client library named, go-redis
// or rueidis, checks that it answers, and returns a store over it and a
// function that closes it.
func openRedis(url, client string) (backend.Store, func(), error) {
	opened, err := storeurl.Open(context.Background(), url, storeurl.WithClient(client))
	if err != nil {
		return nil, nil, err
	}
	return opened.Store, func() { _ = opened.Close() }, nil
}
