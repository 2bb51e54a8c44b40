package harness

import (
	"context"
	"flag"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitkit/limitkit/internal/dev/redistest"
)

func startServer(t *testing.T) *Server {
	t.Helper()
	redistest.Require(t, "redis-server")
	s, err := StartServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestParseProcStat(t *testing.T) {
	// utime 150 and stime 50 ticks: 2 s; the name holds ") (" to show the
	// fields are counted from the last ')'.
	stat := "4242 (redis) (x) S 1 4242 4242 0 -1 4194560 100 0 0 0 150 50 0 0 20 0 5 0 100 1000 200"
	d, err := parseProcStat(stat)
	if err != nil || d != 2*time.Second {
		t.Fatalf("%v, %v; want 2s", d, err)
	}
	for _, bad := range []string{"4242 redis S 1", "4242 (redis) S 1 2", "4242 (r) S 1 4242 4242 0 -1 4194560 100 0 0 0 x 50"} {
		if _, err := parseProcStat(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestServerProcCPU(t *testing.T) {
	s := startServer(t)
	d, err := s.ProcCPU()
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	// A server that has started and answered has used some CPU; a wrong
	// field would read a count or a flag, not a duration this small.
	if d < 0 || d > time.Hour {
		t.Fatalf("redis-server CPU %v", d)
	}
}

func TestNewGoRedisFillsPool(t *testing.T) {
	s := startServer(t)
	o := GoRedisOptions(s.Addr())
	o.PoolSize = 7
	// The control: a plain client has dialled nothing yet.
	plain := redis.NewClient(o)
	defer plain.Close()
	if n := plain.PoolStats().TotalConns; n != 0 {
		t.Fatalf("plain client: %d connections before any command", n)
	}
	c, err := NewGoRedis(o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if n := c.PoolStats().TotalConns; n != 7 {
		t.Fatalf("%d connections, want the pool's 7", n)
	}
}

// Measure counts the commands run inside it, script calls apart, and
// neither the commands run before it (a warm-up) nor its own control
// commands; without a server it measures the process alone.
func TestMeasure(t *testing.T) {
	s := startServer(t)
	ctx := context.Background()
	c := s.Client()
	// The warm-up, which Measure must leave out.
	for range 2 {
		if err := c.Incr(ctx, "warm").Err(); err != nil {
			t.Fatal(err)
		}
	}
	var runErr error
	u, err := Measure(ctx, s, func() {
		for range 5 {
			if runErr == nil {
				runErr = c.Eval(ctx, "return 1", nil).Err()
			}
		}
		for range 3 {
			if runErr == nil {
				runErr = c.Incr(ctx, "k").Err()
			}
		}
	})
	if err != nil || runErr != nil {
		t.Fatal(err, runErr)
	}
	if u.ScriptCalls != 5 || u.Commands != 8 || u.ScriptUsec < 0 || u.InfoCPU < 0 || u.ProcCPU < 0 {
		t.Fatalf("%+v; want 5 script calls and 8 commands", u)
	}
	var sink [][]byte
	u, err = Measure(ctx, nil, func() {
		for range 100 {
			sink = append(sink, make([]byte, 64))
		}
	})
	if err != nil || u.Mallocs < 100 || u.Bytes < 6400 || u.Commands != 0 || u.ScriptCalls != 0 || len(sink) != 100 {
		t.Fatalf("without a server: %+v, %v; want 100 allocations or more and no server figures", u, err)
	}
}

func TestParseCommandStats(t *testing.T) {
	stats, err := ParseCommandStats("# Commandstats\r\ncmdstat_evalsha:calls=10,usec=55,usec_per_call=5.50,rejected_calls=0,failed_calls=0\r\ncmdstat_incr:calls=3,usec=1,usec_per_call=0.33\r\n")
	if err != nil {
		t.Fatal(err)
	}
	if stats["evalsha"] != (CmdStat{Calls: 10, Usec: 55}) || stats["incr"] != (CmdStat{Calls: 3, Usec: 1}) {
		t.Fatalf("%+v", stats)
	}
}

func TestParseBenchmarkCSV(t *testing.T) {
	out := `"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
"EVALSHA abc 1 k","71428.57","0.800","0.100","0.700","1.500","2.000","5.000"
`
	rps, err := parseBenchmarkCSV(out)
	if err != nil || rps != 71428.57 {
		t.Fatalf("%v, %v", rps, err)
	}
	if _, err := parseBenchmarkCSV(""); err == nil || !strings.Contains(err.Error(), "no result") {
		t.Fatalf("empty output: %v", err)
	}
}

func TestRotate(t *testing.T) {
	xs := []int{0, 1, 2, 3, 4, 5, 6}
	seen := map[int]bool{}
	for round := range 3 {
		got := Rotate(xs, round, 3)
		sorted := slices.Sorted(slices.Values(got))
		if !slices.Equal(sorted, xs) {
			t.Fatalf("round %d: %v is not a permutation of %v", round, got, xs)
		}
		if seen[got[0]] {
			t.Fatalf("round %d starts with %d again", round, got[0])
		}
		seen[got[0]] = true
	}
	if got := Rotate(xs, 0, 3); !slices.Equal(got, xs) {
		t.Fatalf("round 1 is %v, want the list's order", got)
	}
	// More rounds than cells: each round still starts elsewhere.
	if got := Rotate([]int{0, 1}, 1, 5); got[0] != 1 {
		t.Fatalf("round 2 of 5 over 2 cells is %v, want it to start at 1", got)
	}
}

func TestShortfall(t *testing.T) {
	if s := Shortfall(DefaultRounds, DefaultMeasured); s != "" {
		t.Errorf("the defaults fall short: %q", s)
	}
	for _, c := range []struct {
		rounds int
		d      time.Duration
	}{{1, DefaultMeasured}, {DefaultRounds, 150 * time.Millisecond}} {
		if s := Shortfall(c.rounds, c.d); !strings.Contains(s, "smoke run") {
			t.Errorf("%d rounds of %v: %q; want it called a smoke run", c.rounds, c.d, s)
		}
	}
}

func TestMedian(t *testing.T) {
	vs := []float64{3, 1, 2}
	if m := Median(vs); m != 2 || !slices.Equal(vs, []float64{3, 1, 2}) {
		t.Errorf("Median(3,1,2) = %v, input now %v", m, vs)
	}
	if m := Median([]float64{4, 1, 2, 3}); m != 2.5 {
		t.Errorf("Median(4,1,2,3) = %v", m)
	}
	if m := Median(nil); m != 0 {
		t.Errorf("Median() = %v", m)
	}
}

// RatioOf pairs the values of one round: a over b is 1 in two rounds of
// three, which the ratio of the medians (5) would hide.
func TestRatioOf(t *testing.T) {
	a, b := []float64{10, 1, 5}, []float64{10, 1, 1}
	r := RatioOf(a, b)
	if r != (Ratio{Median: 1, Min: 1, Max: 5, Rounds: 3, OK: true}) {
		t.Errorf("RatioOf(%v, %v) = %+v; want median 1 in 1..5 over 3 rounds", a, b, r)
	}
	if ratioOfMedians := Median(a) / Median(b); ratioOfMedians == r.Median {
		t.Errorf("the control: the ratio of medians, %v, should differ from the per-round median", ratioOfMedians)
	}
	for _, bad := range [][2][]float64{{{1, 2}, {1, 0}}, {nil, nil}} {
		if r := RatioOf(bad[0], bad[1]); r.OK {
			t.Errorf("RatioOf(%v, %v) = %+v; want not OK", bad[0], bad[1], r)
		}
	}
}

func TestWriteTable(t *testing.T) {
	var b strings.Builder
	WriteTable(&b, "-r", []string{"name", "n/s", "note"}, [][]string{{"a", "1", "x"}, {"b", "22", ""}})
	want := "| name | n/s | note |\n|---|--:|---|\n| a | 1 | x |\n| b | 22 |  |\n\n"
	if b.String() != want {
		t.Errorf("got\n%q\nwant\n%q", b.String(), want)
	}
}

func TestSetUnset(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	count := fs.Int("count", DefaultRounds, "")
	d := fs.Duration("time", DefaultMeasured, "")
	if err := fs.Parse([]string{"-count", "5"}); err != nil {
		t.Fatal(err)
	}
	if err := SetUnset(fs, map[string]string{"count": "1", "time": "500ms"}); err != nil {
		t.Fatal(err)
	}
	if *count != 5 || *d != 500*time.Millisecond {
		t.Errorf("count %d, time %v; want the given 5 and the smoke run's 500ms", *count, *d)
	}
	if err := SetUnset(fs, map[string]string{"nosuch": "1"}); err == nil {
		t.Error("an unknown flag: no error")
	}
}

// Loop stops each caller after MaxCallsPerCaller calls even when d is far
// off, and when ctx ends; each caller's done runs once.
func TestLoopBounds(t *testing.T) {
	var calls, dones atomic.Int64
	counting := func(int) (func(), func()) {
		n := int64(0) // the caller's own count, handed over in done
		return func() { n++ }, func() { calls.Add(n); dones.Add(1) }
	}
	Loop(context.Background(), 2, time.Hour, counting)
	if calls.Load() != 2*MaxCallsPerCaller || dones.Load() != 2 {
		t.Fatalf("%d calls, %d dones; want %d and 2", calls.Load(), dones.Load(), 2*MaxCallsPerCaller)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var total atomic.Int64
	Loop(ctx, 3, time.Hour, func(int) (func(), func()) {
		return func() {
			if total.Add(1) >= 100 {
				cancel()
				time.Sleep(time.Millisecond) // slow, so the count bound cannot end the loop first
			}
		}, func() {}
	})
	if n := total.Load(); n < 100 || n >= 3*MaxCallsPerCaller {
		t.Fatalf("%d calls after ctx ended at the 100th; want it to stop the loop", n)
	}
}
