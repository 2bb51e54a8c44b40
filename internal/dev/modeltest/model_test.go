package modeltest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/denycache"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/rueidisstore"
	"github.com/limitkit/limitkit/fallback"
	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// steps is the number of random steps per algorithm and stack:
// LIMITKIT_MODEL_STEPS sets it for a long run.
func steps(t *testing.T, def int) int {
	if s := os.Getenv("LIMITKIT_MODEL_STEPS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("LIMITKIT_MODEL_STEPS=%q: write a positive number of steps", s)
		}
		return n
	}
	return def
}

// seed is LIMITKIT_MODEL_SEED, or the time: printed, so a failure can be
// replayed.
func seed(t *testing.T) uint64 {
	if s := os.Getenv("LIMITKIT_MODEL_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("LIMITKIT_MODEL_SEED=%q: write a number", s)
		}
		return n
	}
	return uint64(time.Now().UnixNano())
}

func newMemory(t *testing.T) backend.Store {
	m, err := memorystore.New()
	if err != nil {
		t.Error(err)
	}
	return m
}

type stack struct {
	name  string
	store backend.Store
}

func stacks(t *testing.T) []stack {
	mem, err := memorystore.New()
	if err != nil {
		t.Fatal(err)
	}
	out := []stack{{name: "memory", store: mem}}
	if gc, rc, ok := redisClients(t); ok {
		gs, err := goredisstore.New(gc)
		if err != nil {
			t.Fatal(err)
		}
		rs, err := rueidisstore.New(rc)
		if err != nil {
			t.Fatal(err)
		}
		guard := func(s backend.Store) backend.Store {
			// A long deadline: a degraded answer fails the run, it must
			// not come from a loaded machine.
			f, err := fallback.New(s, fallback.WithTimeout(10*time.Second), fallback.WithPolicy(backend.FailClosed))
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
		cache := func(s backend.Store, bus denycache.Bus) backend.Store {
			d, err := denycache.New(s, bus)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = d.Close() })
			return d
		}
		out = append(out, topologies(t)...)
		out = append(out,
			stack{name: "goredis", store: gs},
			stack{name: "rueidis", store: rs},
			stack{name: "fallback(goredis)", store: guard(gs)},
			stack{name: "denycache(goredis)", store: cache(gs, goredisstore.NewBus(gc))},
			stack{name: "fallback(denycache(rueidis))", store: guard(cache(rs, rueidisstore.NewBus(rc)))},
		)
	}
	return out
}

// redisClients starts a redis-server and returns a client of each kind on
// it; ok is false (the memory store alone) when redis-server is missing
// and not required.
func redisClients(t *testing.T) (gc *redis.Client, rc rueidis.Client, ok bool) {
	if _, err := exec.LookPath("redis-server"); err != nil && os.Getenv("LIMITKIT_REQUIRE_REDIS") != "1" {
		t.Log("redis-server not found: the memory store alone (install redis-server for the Redis stacks)")
		return nil, nil, false
	}
	redistest.Require(t)
	srv := redistest.Start(t)
	gc = redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = gc.Close() })
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	return gc, rc, true
}

// TestModel drives every algorithm on every store and stack against the
// reference model: two processes with different rules on one key, limit and
// window changes, late requests, clock jumps, resets, TakeAll over two keys
// and, for concurrency, leases acquired, released and renewed.
func TestModel(t *testing.T) {
	runEveryStack(t, "model", algorithms.Names(), 600, nil)
}

// runEveryStack runs one run per algorithm of algs on every stack, the runs
// of a stack at once, each prepared by setup (when set), and reports every
// divergence with the seed that replays it.
func runEveryStack(t *testing.T, tag string, algs []algorithms.Name, defaultSteps int, setup func(*run) error) {
	n := steps(t, defaultSteps)
	base := seed(t)
	t.Logf("seed %d (LIMITKIT_MODEL_SEED=%d replays it), %d steps per algorithm and stack", base, base, n)
	for si, st := range stacks(t) {
		t.Run(st.name, func(t *testing.T) {
			var wg sync.WaitGroup
			errs := make([]error, len(algs))
			for ai, alg := range algs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if errs[ai] = Covers(algorithms.Lookup(alg)); errs[ai] != nil {
						return
					}
					prefix := fmt.Sprintf("%s:%d:%d:%s:", tag, base, si, alg)
					store := st.store
					if st.name == "memory" {
						// A store of its own: the memory store sweeps keys by
						// the newest time it has seen, and each run's
						// simulated clock runs on its own.
						store = newMemory(t)
					}
					r := newRun(context.Background(), store, alg, prefix, base+uint64(ai))
					if setup != nil {
						if errs[ai] = setup(r); errs[ai] != nil {
							return
						}
					}
					errs[ai] = r.Steps(n)
				}()
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// TestModelCatchesForgettingLog is the control: a log that keeps only the
// newest L units when a request carries limit L (issue 22's defect 1, the
// old shrinkTo) is caught by the same run. Reintroducing the defect in the
// real engines is caught too: see the README's model-test section.
func TestModelCatchesForgettingLog(t *testing.T) {
	caught := 0
	const tries = 10
	for i := range tries {
		r := newRun(context.Background(), &forgettingLog{}, algorithms.SlidingLog, "control:", uint64(i))
		if err := r.Steps(600); err != nil {
			caught++
			if caught == 1 {
				t.Logf("caught (seed %d): %v", i, err)
			}
		}
	}
	if caught < tries {
		t.Fatalf("the forgetting log passed %d of %d runs: the model test cannot see defect 1", tries-caught, tries)
	}
}

// forgettingLog is a sliding log with defect 1: a take at limit L first
// trims the key to its newest L units.
type forgettingLog struct {
	mu   sync.Mutex
	keys map[backend.Key][]int64
}

func (f *forgettingLog) log(k backend.Key) *Log {
	if f.keys == nil {
		f.keys = map[backend.Key][]int64{}
	}
	return &Log{units: f.keys[k]}
}

func (f *forgettingLog) take(req backend.Request) backend.Result {
	l := f.log(req.Key)
	if n := int64(len(l.units)); n > req.Rule.Limit {
		l.units = l.units[n-req.Rule.Limit:]
	}
	now, w := req.Now.UnixMilli(), req.Rule.Window.Milliseconds()
	res := l.Decide(now, w, req.Rule.Limit, req.Cost, true)
	if res.Allowed {
		l.Record(now, req.Cost)
	}
	f.keys[req.Key] = l.units
	return res
}

func (f *forgettingLog) Take(_ context.Context, req backend.Request) (backend.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.take(req), nil
}

func (f *forgettingLog) Peek(_ context.Context, req backend.Request) (backend.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.log(req.Key)
	return l.Decide(req.Now.UnixMilli(), req.Rule.Window.Milliseconds(), req.Rule.Limit, req.Cost, false), nil
}

func (f *forgettingLog) Reset(_ context.Context, k backend.Key, _ algorithms.Rule, _ time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.keys, k)
	return nil
}

func (f *forgettingLog) TakeAll(_ context.Context, reqs []backend.Request) (backend.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range reqs {
		l := f.log(r.Key)
		if !l.Decide(r.Now.UnixMilli(), r.Rule.Window.Milliseconds(), r.Rule.Limit, r.Cost, true).Allowed {
			return backend.Result{Limit: r.Rule.Limit}, nil
		}
	}
	for _, r := range reqs {
		f.take(r)
	}
	return backend.Result{Allowed: true}, nil
}

// topologies are the stores on a 3-master cluster (a TakeAll's two keys in
// different slots: checked, then taken in order, refunded on a late
// denial) and through Sentinel, with both clients.
func topologies(t *testing.T) []stack {
	cluster := redistest.StartCluster(t, 3, 0)
	sn := redistest.StartSentinel(t)
	gcc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
	gsc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: sn.MasterName, SentinelAddrs: sn.SentinelAddrs()})
	t.Cleanup(func() { _ = gcc.Close(); _ = gsc.Close() })
	rcc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: cluster.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rcc.Close)
	rsc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: sn.SentinelAddrs(),
		Sentinel: rueidis.SentinelOption{MasterSet: sn.MasterName}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rsc.Close)
	var out []stack
	for name, s := range map[string]func() (backend.Store, error){
		"goredis-cluster":  func() (backend.Store, error) { return goredisstore.New(gcc) },
		"rueidis-cluster":  func() (backend.Store, error) { return rueidisstore.New(rcc) },
		"goredis-sentinel": func() (backend.Store, error) { return goredisstore.New(gsc) },
		"rueidis-sentinel": func() (backend.Store, error) { return rueidisstore.New(rsc) },
	} {
		st, err := s()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out = append(out, stack{name: name, store: st})
	}
	slices.SortFunc(out, func(a, b stack) int { return strings.Compare(a.name, b.name) })
	return out
}
