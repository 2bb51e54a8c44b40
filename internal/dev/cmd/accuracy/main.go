// Command accuracy prints the algorithm guide's table: for every
// algorithm, how its decisions compare with the exact sliding log's on a
// generated trace, the memory a key takes on Redis and in the memory
// store, and decisions per second.
//
//	go run ./internal/dev/cmd/accuracy                 # accuracy and the memory store only
//	go run ./internal/dev/cmd/accuracy -redis auto     # also Redis: starts a private redis-server
//	go run ./internal/dev/cmd/accuracy -redis redis://127.0.0.1:6379/15   # an existing server (FLUSHDB!)
//	go run ./internal/dev/cmd/accuracy -redis auto -arrival 64 -windows 3  # the logs under out-of-order arrival
//
// The trace is seeded and replayed on a fake clock, so the accuracy columns
// are the same on every run; memory and speed are measured.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/rueidisstore"
	"github.com/limitkit/limitkit/internal/dev/accuracy"
	"github.com/limitkit/limitkit/internal/rediswire"
)

type config struct {
	trace    accuracy.TraceConfig
	redis    string
	memKeys  int
	light    int
	duration time.Duration
	// arrival, when positive, replaces the table by the arrival-order
	// measurement with that many callers.
	arrival int
	speedup float64
}

func main() {
	cfg := config{trace: accuracy.DefaultTrace}
	flag.Uint64Var(&cfg.trace.Seed, "seed", cfg.trace.Seed, "trace seed")
	flag.IntVar(&cfg.trace.Keys, "keys", cfg.trace.Keys, "keys in the trace")
	flag.IntVar(&cfg.trace.Windows, "windows", cfg.trace.Windows, "trace length in windows")
	flag.StringVar(&cfg.redis, "redis", "", `Redis to measure on: "auto" starts a private redis-server, a URL uses a server `+
		`whose current database is flushed; empty skips Redis`)
	flag.IntVar(&cfg.memKeys, "mem-keys", 100_000, "keys in the memory measurement: 1% heavy hitters (100 units), the rest light")
	flag.IntVar(&cfg.light, "light-units", 20, "units each light key holds in the memory measurement")
	flag.DurationVar(&cfg.duration, "duration", 3*time.Second, "how long each speed measurement runs")
	flag.IntVar(&cfg.arrival, "arrival", 0, "with -redis: instead of the table, replay the trace on Redis in real time from this many "+
		"callers stamping requests with their own clock, and judge the logs' decisions by timestamp")
	flag.Float64Var(&cfg.speedup, "speedup", 1, "with -arrival: replay the trace this many times faster than real time")
	flag.Parse()
	if err := run(os.Stdout, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "accuracy:", err)
		os.Exit(1)
	}
}

// row is one algorithm's line of the table.
type row struct {
	acc                     accuracy.Result
	redisFull, redisLight   int64   // MEMORY USAGE of a key with 100 and with light units
	redisMixed, memMixed    float64 // bytes per key over memKeys keys, 1% heavy
	redisRate, memRate      float64 // decisions/s
	redisMeasured, memKnown bool
}

func run(out io.Writer, cfg config) error {
	ctx := context.Background()
	if cfg.arrival > 0 {
		if cfg.redis == "" || cfg.speedup <= 0 {
			return errors.New("-arrival needs -redis and a positive -speedup")
		}
		addr, stop, err := redisAddr(cfg.redis)
		if err != nil {
			return err
		}
		defer stop()
		return measureArrival(ctx, out, addr, cfg, cfg.arrival, cfg.speedup)
	}
	names := algorithms.Names()
	rows := make([]row, len(names))

	reqs := accuracy.Generate(cfg.trace)
	for i, res := range accuracy.Replay(reqs, cfg.trace.Keys, cfg.trace.Limit, cfg.trace.Window, names) {
		rows[i].acc = res
	}
	// Speed at 100 per minute; memory at 100 per hour, so that no key
	// (GCRA's refill fastest) expires while the measurement runs.
	rule := func(alg algorithms.Name) algorithms.Rule {
		return algorithms.Rule{Algorithm: alg, Limit: 100, Window: time.Minute}
	}
	memRule := func(alg algorithms.Name) algorithms.Rule {
		return algorithms.Rule{Algorithm: alg, Limit: 100, Window: time.Hour}
	}
	for i, alg := range names {
		store, err := memorystore.New()
		if err != nil {
			return err
		}
		rows[i].memMixed = heapPerKey(ctx, memRule(alg), cfg.memKeys, cfg.light)
		rows[i].memRate = rate(ctx, store, rule(alg), runtime.GOMAXPROCS(0), cfg.duration)
		rows[i].memKnown = true
	}

	if cfg.redis != "" {
		addr, stop, err := redisAddr(cfg.redis)
		if err != nil {
			return err
		}
		defer stop()
		if err := measureRedis(ctx, addr, cfg, rows, rule, memRule); err != nil {
			return err
		}
	}
	printTable(out, cfg, rows)
	return nil
}

// measureRedis fills in the Redis columns.
func measureRedis(ctx context.Context, addr redisTarget, cfg config, rows []row, rule, memRule func(algorithms.Name) algorithms.Rule) error {
	gc := redis.NewClient(&redis.Options{Addr: addr.addr, DB: addr.db, PoolSize: 64})
	defer gc.Close()
	if err := gc.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis at %s: %w", addr.addr, err)
	}
	gstore, err := goredisstore.New(gc)
	if err != nil {
		return err
	}
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr.addr}, SelectDB: addr.db, DisableCache: true})
	if err != nil {
		return err
	}
	defer rc.Close()
	rstore, err := rueidisstore.New(rc)
	if err != nil {
		return err
	}
	now := time.Now().UnixMilli()
	for i, alg := range algorithms.Names() {
		r := memRule(alg)
		if err := gc.FlushDB(ctx).Err(); err != nil {
			return err
		}
		for _, n := range []int{100, cfg.light} {
			key := backend.Key{Prefix: "acc:", ID: "one" + strconv.Itoa(n)}
			if err := fill(ctx, gstore, key, r, n, now); err != nil {
				return err
			}
			name := rediswire.Key(key, r)
			if r.PerWindow() {
				// A key per window: the one of the last take.
				name, _, _ = rediswire.NativeKey(&backend.Request{Key: key, Rule: r, Now: time.UnixMilli(now + int64(n) - 1)})
			}
			bytes, err := gc.MemoryUsage(ctx, name, 0).Result()
			if err != nil {
				return err
			}
			if n == 100 {
				rows[i].redisFull = bytes
			} else {
				rows[i].redisLight = bytes
			}
		}
		if err := gc.FlushDB(ctx).Err(); err != nil {
			return err
		}
		before, err := usedMemory(ctx, gc)
		if err != nil {
			return err
		}
		if err := population(ctx, rstore, r, cfg.memKeys, cfg.light, now); err != nil {
			return err
		}
		after, err := usedMemory(ctx, gc)
		if err != nil {
			return err
		}
		rows[i].redisMixed = float64(after-before) / float64(cfg.memKeys)
		if err := gc.FlushDB(ctx).Err(); err != nil {
			return err
		}
		rows[i].redisRate = rate(ctx, rstore, rule(alg), 64, cfg.duration)
		rows[i].redisMeasured = true
	}
	return gc.FlushDB(ctx).Err()
}

// fill takes n units, one per millisecond from start, on key.
func fill(ctx context.Context, store backend.Store, key backend.Key, rule algorithms.Rule, n int, start int64) error {
	for j := range n {
		res, err := store.Take(ctx, backend.Request{Key: key, Rule: rule, Now: time.UnixMilli(start + int64(j)), Cost: 1})
		if err != nil {
			return err
		}
		if !res.Allowed && rule.Algorithm != algorithms.GCRA {
			return fmt.Errorf("%s: take %d of %d denied", rule.Algorithm, j+1, n)
		}
	}
	return nil
}

// population fills keys keys, one in a hundred a heavy hitter with 100
// units, the others with light units, from 64 goroutines.
func population(ctx context.Context, store backend.Store, rule algorithms.Rule, keys, light int, start int64) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 64 {
		wg.Go(func() {
			for {
				k := int(next.Add(1)) - 1
				if k >= keys {
					return
				}
				n := light
				if k%100 == 0 {
					n = 100
				}
				if err := fill(ctx, store, backend.Key{Prefix: "acc:", ID: strconv.Itoa(k)}, rule, n, start); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// heapPerKey returns the live heap a memory store holds per key, for keys
// keys filled as population fills them.
func heapPerKey(ctx context.Context, rule algorithms.Rule, keys, light int) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	store, err := memorystore.New(memorystore.WithMaxKeys(keys))
	if err != nil {
		panic(err)
	}
	if err := population(ctx, store, rule, keys, light, time.Now().UnixMilli()); err != nil {
		panic(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(store)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(keys)
}

// rate returns the decisions/s of callers goroutines taking from 10,000
// keys at the real time for d (a limit of 100 per minute: nearly every
// request admitted).
func rate(ctx context.Context, store backend.Store, rule algorithms.Rule, callers int, d time.Duration) float64 {
	var n, failed atomic.Int64
	prefix := fmt.Sprintf("rate:%d:", time.Now().UnixNano())
	deadline := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
			req := backend.Request{Key: backend.Key{Prefix: prefix}, Rule: rule, Cost: 1}
			for i := 0; ; i++ {
				if i%64 == 0 && time.Now().After(deadline) {
					return
				}
				req.Key.ID = strconv.Itoa(rng.IntN(10_000))
				req.Now = time.Now()
				if _, err := store.Take(ctx, req); err != nil {
					failed.Add(1)
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		return 0
	}
	return float64(n.Load()) / time.Since(start).Seconds()
}

func usedMemory(ctx context.Context, c *redis.Client) (int64, error) {
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("no used_memory in INFO memory")
}

type redisTarget struct {
	addr string
	db   int
}

// redisAddr returns the server to measure on: a private redis-server on a
// free loopback port for "auto", else the one the URL names.
func redisAddr(spec string) (redisTarget, func(), error) {
	if spec != "auto" {
		opt, err := redis.ParseURL(spec)
		if err != nil {
			return redisTarget{}, nil, err
		}
		return redisTarget{opt.Addr, opt.DB}, func() {}, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return redisTarget{}, nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		return redisTarget{}, nil, fmt.Errorf("starting redis-server (install it, or pass -redis URL): %w", err)
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); c.Ping(context.Background()).Err() != nil; {
		if time.Now().After(deadline) {
			stop()
			return redisTarget{}, nil, errors.New("redis-server did not answer within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return redisTarget{addr, 0}, stop, nil
}

func printTable(out io.Writer, cfg config, rows []row) {
	t := cfg.trace
	fmt.Fprintf(out, "Trace: %d keys, %d per %v for %d windows (seed %d): %d requests, %.1f%% of them to keys the exact log limited.\n\n",
		t.Keys, t.Limit, t.Window, t.Windows, t.Seed, rows[0].acc.Requests,
		rows[0].acc.Rate(rows[0].acc.LimitedRequests))
	fmt.Fprintln(out, "| algorithm | differs from sliding_log | on limited keys | wrongly allowed | wrongly denied | worst window |",
		fmt.Sprintf("Redis bytes/key: 100 / %d units | Redis, %d keys 1%% heavy | memory store, same | Redis decisions/s | memory store decisions/s |",
			cfg.light, cfg.memKeys))
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		a := r.acc
		redisFull, redisMixed, redisRate := "-", "-", "-"
		if r.redisMeasured {
			redisFull = fmt.Sprintf("%d / %d", r.redisFull, r.redisLight)
			redisMixed = fmt.Sprintf("%.0f", r.redisMixed)
			redisRate = fmt.Sprintf("%.0f", r.redisRate)
		}
		fmt.Fprintf(out, "| `%s` | %.3f%% | %.2f%% | %.3f%% | %.3f%% | %.2f× | %s | %s | %.0f | %s | %.0f |\n",
			a.Algorithm, a.Rate(a.Differ), 100*float64(a.DifferLimited)/float64(max(a.LimitedRequests, 1)),
			a.Rate(a.WronglyAllowed), a.Rate(a.WronglyDenied), float64(a.WorstWindow)/float64(t.Limit),
			redisFull, redisMixed, r.memMixed, redisRate, r.memRate)
	}
	fmt.Fprintf(out, "\nWrongly allowed/denied: judged by an exact window over the algorithm's own admissions. "+
		"Worst window: most units admitted on one key in any window, over the limit. "+
		"Memory at 100 per hour: heavy keys hold 100 units, light ones %d. Speed at 100 per minute with %d goroutines in memory "+
		"and 64 callers (rueidis) on Redis, over 10,000 keys, for %v each.\n",
		cfg.light, runtime.GOMAXPROCS(0), cfg.duration)
}
