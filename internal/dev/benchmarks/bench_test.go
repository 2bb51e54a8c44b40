package benchmarks

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/limitkit/limitkit/internal/dev/benchmarks/harness"
)

// server is the redis-server shared by this package's tests and
// benchmarks, or nil when redis-server is not installed.
var server *harness.Server

// serverErr says why server is nil.
var serverErr error

func TestMain(m *testing.M) {
	server, serverErr = harness.StartServer()
	code := m.Run()
	if server != nil {
		_ = server.Close()
	}
	os.Exit(code)
}

// needServer returns the shared server, or skips (fails when
// LIMITKIT_REQUIRE_REDIS=1) when there is none.
func needServer(tb testing.TB) *harness.Server {
	tb.Helper()
	if server == nil {
		if os.Getenv("LIMITKIT_REQUIRE_REDIS") == "1" {
			tb.Fatalf("no redis-server: %v", serverErr)
		}
		tb.Skipf("no redis-server: %v", serverErr)
	}
	return server
}

// checkDecisions makes a few decisions through a prepared cell and checks
// what the workload promises: never-deny admits all, deny-heavy (after the
// warm-up spent every key) admits none.
func checkDecisions(t *testing.T, c Contender, w Workload) {
	t.Helper()
	ctx := context.Background()
	cell, err := Prepare(ctx, c, w)
	if err != nil {
		t.Fatal(err)
	}
	defer cell.Close()
	for i := range 50 {
		id := cell.ids[i%len(cell.ids)]
		ok, err := cell.decide(ctx, id)
		if err != nil {
			t.Fatalf("decision %d for %s: %v", i, id, err)
		}
		if c.Group == "floor" {
			continue
		}
		if ok == w.Deny {
			t.Fatalf("decision %d for %s: admitted=%v under %s", i, id, ok, w)
		}
	}
}

func TestMemoryContenders(t *testing.T) {
	for _, c := range MemoryContenders() {
		for _, w := range Workloads() {
			t.Run(c.Name+"/"+w.String(), func(t *testing.T) { checkDecisions(t, c, w) })
		}
	}
}

func TestRedisContenders(t *testing.T) {
	s := needServer(t)
	for _, c := range RedisContenders(s.Addr()) {
		for _, w := range []Workload{{Keys: 100}, {Keys: 100, Deny: true}} {
			t.Run(c.Name+"/"+w.String(), func(t *testing.T) {
				// Peers keep their state under the same key names
				// whatever the limit: start each from empty.
				if err := s.FlushAll(context.Background()); err != nil {
					t.Fatal(err)
				}
				checkDecisions(t, c, w)
			})
		}
	}
}

func TestBenchmarkFunctionsCount(t *testing.T) {
	// Short runs: this checks the counting, not the speed.
	old := flag.Lookup("test.benchtime").Value.String()
	if err := flag.Set("test.benchtime", "20ms"); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = flag.Set("test.benchtime", old) }()
	c := MemoryContenders()[0]
	for _, w := range []Workload{{Keys: 10}, {Keys: 10, Deny: true}} {
		cell, err := Prepare(context.Background(), c, w)
		if err != nil {
			t.Fatal(err)
		}
		for _, bench := range []func(*testing.B){cell.Serial(), cell.Parallel(), cell.Concurrent(3)} {
			before := cell.Decisions()
			r := testing.Benchmark(bench)
			// testing.Benchmark calls the function several times; the
			// cell counts all of them.
			if cell.Decisions()-before < int64(r.N) || cell.Errors() != 0 {
				t.Fatalf("%s: decisions %d (N %d), errors %d", w, cell.Decisions()-before, r.N, cell.Errors())
			}
		}
		want := cell.Decisions()
		if w.Deny {
			want = 0
		}
		if cell.Admitted() != want {
			t.Fatalf("%s: admitted %d of %d", w, cell.Admitted(), cell.Decisions())
		}
		cell.Close()
	}
}

func TestFloors(t *testing.T) {
	s := needServer(t)
	if _, err := exec.LookPath("redis-benchmark"); err != nil {
		t.Skip("no redis-benchmark (apt-get install redis-tools)")
	}
	ctx := context.Background()
	fs, err := Floors(ctx, s, time.Now().UnixMilli(), 4, []Workload{{Keys: 10}, {Keys: 10, Deny: true}})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		f.Requests = 200
		res, err := f.Run(ctx, s)
		if err != nil {
			t.Fatalf("%s -P %d: %v", f.Name, f.Pipeline, err)
		}
		if res.PerSecond <= 0 || res.ServerUsec <= 0 {
			t.Fatalf("%s -P %d: %+v", f.Name, f.Pipeline, res)
		}
	}
}

// benchName is a contender's name as a sub-benchmark level: without
// slashes, which would split it into levels of its own.
func benchName(c Contender) string { return strings.ReplaceAll(c.Name, "/", "-") }

// BenchmarkMemory runs every in-memory contender on every workload,
// serially and with b.RunParallel:
//
//	go test -run x -bench 'Memory/limitkit_store_fixed_window/keys=10000/' .
func BenchmarkMemory(b *testing.B) {
	for _, c := range MemoryContenders() {
		b.Run(benchName(c), func(b *testing.B) {
			for _, w := range Workloads() {
				b.Run(w.String(), func(b *testing.B) {
					cell, err := Prepare(context.Background(), c, w)
					if err != nil {
						b.Fatal(err)
					}
					defer cell.Close()
					b.Run("serial", cell.Serial())
					b.Run("parallel", cell.Parallel())
				})
			}
		})
	}
}

// BenchmarkRedis runs every Redis contender on the Redis workloads with 1,
// 8 and 64 concurrent callers, on an emptied server for each workload,
// after a 1 s warm-up (cmd/compare measures by time instead, with medians
// and ratios):
//
//	go test -run x -bench 'Redis/limitkit_rueidis_sliding_log/keys=10000/never-deny/c=64' .
func BenchmarkRedis(b *testing.B) {
	s := needServer(b)
	ctx := context.Background()
	for _, c := range RedisContenders(s.Addr()) {
		b.Run(benchName(c), func(b *testing.B) {
			for _, w := range RedisWorkloads(time.Second) {
				b.Run(w.String(), func(b *testing.B) {
					if err := s.FlushAll(ctx); err != nil {
						b.Fatal(err)
					}
					cell, err := Prepare(ctx, c, w)
					if err != nil {
						b.Fatal(err)
					}
					defer cell.Close()
					if err := Warm(ctx, cell, WarmupCallers, time.Second); err != nil {
						b.Fatal(err)
					}
					for _, callers := range Callers {
						b.Run(fmt.Sprintf("c=%d", callers), cell.Concurrent(callers))
					}
				})
			}
		})
	}
}
