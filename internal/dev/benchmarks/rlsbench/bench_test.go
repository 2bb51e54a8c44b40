package rlsbench

import (
	"context"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/internal/dev/benchmarks/harness"
	"github.com/limitkit/limitkit/internal/dev/redistest"
)

func startServer(t *testing.T) *harness.Server {
	t.Helper()
	redistest.Require(t, "redis-server")
	srv, err := harness.StartServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// decides reports the contenders that count: all but the EVALSHA and gRPC
// floors, which answer OK whatever the count.
func decides(c Contender) bool {
	return c.Group != GroupFloor || strings.HasSuffix(c.Name, "INCRBY+EXPIRE")
}

// overAt sends 21 requests of n descriptors with fixed values to c under
// 20 per hour and returns the 1-based index of each OVER_LIMIT answer. A
// run that straddles an hour boundary is made again (fixed windows reset
// there).
func overAt(t *testing.T, srv *harness.Server, c Contender, n int) []int {
	t.Helper()
	ctx := context.Background()
	for attempt := 0; ; attempt++ {
		if err := srv.FlushAll(ctx); err != nil {
			t.Fatal(err)
		}
		call, closeC, err := c.Start(srv.Addr(), Spec{Unit: "hour", RequestsPerUnit: 20})
		if err != nil {
			t.Fatalf("%s: start: %v", c.Name, err)
		}
		req := newRequest(n)
		for i, d := range req.Descriptors {
			d.Entries[0].Value = "id" + strconv.Itoa(i)
		}
		start := time.Now()
		var over []int
		for i := 1; i <= 21; i++ {
			o, err := call(ctx, req)
			if err != nil {
				closeC()
				t.Fatalf("%s: call %d: %v", c.Name, i, err)
			}
			if o {
				over = append(over, i)
			}
		}
		closeC()
		if start.Truncate(time.Hour).Equal(time.Now().Truncate(time.Hour)) || attempt > 0 {
			return over
		}
	}
}

// Every contender that counts admits 20 of 20 per hour and refuses the
// 21st, with one and three descriptors; the floors that do not count
// never refuse, which shows the check tells a counting contender from one
// that only answers.
func TestContendersDecide(t *testing.T) {
	srv := startServer(t)
	for _, c := range Contenders(RateAlgorithms()) {
		for _, n := range []int{1, 3} {
			got := overAt(t, srv, c, n)
			want := []int{21}
			if !decides(c) {
				want = nil
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s, %d descriptors: OVER_LIMIT at calls %v; want %v", c.Name, n, got, want)
			}
		}
	}
}

// The reference algorithm keeps the reference server's key (domain, each
// entry's key and value, the window's start) with the unit as its TTL.
func TestReferenceKeys(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	if err := srv.FlushAll(ctx); err != nil {
		t.Fatal(err)
	}
	call, closeC, err := startReference(Rueidis, srv.Addr(), Spec{Unit: "minute", RequestsPerUnit: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer closeC()
	req := newRequest(3)
	for i, d := range req.Descriptors {
		d.Entries[0].Value = "v" + strconv.Itoa(i)
	}
	if _, err := call(ctx, req); err != nil {
		t.Fatal(err)
	}
	keys, err := srv.Client().Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	re := regexp.MustCompile(`^bench_([abc])_v([012])_(\d+)$`)
	if len(keys) != 3 {
		t.Fatalf("keys %q; want 3", keys)
	}
	for i, k := range keys {
		m := re.FindStringSubmatch(k)
		if m == nil || m[1] != DescriptorKeys[i] || m[2] != strconv.Itoa(i) {
			t.Fatalf("key %q; want bench_%s_v%d_<window start>", k, DescriptorKeys[i], i)
		}
		if start, _ := strconv.ParseInt(m[3], 10, 64); start%60 != 0 {
			t.Errorf("key %q: window start not a multiple of 60 s", k)
		}
		if ttl := srv.Client().TTL(ctx, k).Val(); ttl <= 0 || ttl > time.Minute {
			t.Errorf("key %q: TTL %v; want the unit, 1m", k, ttl)
		}
		if v := srv.Client().Get(ctx, k).Val(); v != "1" {
			t.Errorf("key %q holds %q; want 1", k, v)
		}
	}
}

// A short run without Redis measures every cell, in each round, and the
// report names each contender.
func TestRunReports(t *testing.T) {
	o := Options{Rounds: 2, Measure: 30 * time.Millisecond, Warmup: 10 * time.Millisecond, Callers: 4, Keys: 10,
		Contenders: Contenders([]algorithms.Name{algorithms.FixedWindow, algorithms.SlidingLog})}
	res, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Cells) != 6 { // memory x 2 algorithms + the gRPC floor, x 2 shapes
		t.Fatalf("%d cells; want 6 (no Redis contender without a server)", len(res.Cells))
	}
	for i, c := range res.Cells {
		for r, s := range res.Samples[i] {
			if s.Decisions == 0 || s.P99 < s.P50 || s.Denied != 0 {
				t.Errorf("%s d=%d round %d: %+v", c.Contender.Name, c.Descriptors, r, s.Drive)
			}
		}
	}
	var b strings.Builder
	res.Write(&b, "# test")
	for _, c := range res.Cells {
		if !strings.Contains(b.String(), "| "+c.Contender.Name+" |") {
			t.Errorf("report has no row for %s:\n%s", c.Contender.Name, b.String())
		}
	}
}

func TestPercentileRatio(t *testing.T) {
	lats := make([]time.Duration, 100)
	for i := range lats {
		lats[i] = time.Duration(i + 1)
	}
	if p := percentile(lats, 0.99); p != 99 {
		t.Errorf("p99 of 1..100 = %v", p)
	}
	if p := percentile(lats, 0.5); p != 50 {
		t.Errorf("p50 of 1..100 = %v", p)
	}
	res := &Results{Options: Options{Rounds: 3}, Samples: [][]Sample{
		{{Drive: Drive{Decisions: 10, Elapsed: time.Second}}, {Drive: Drive{Decisions: 30, Elapsed: time.Second}}, {Drive: Drive{Decisions: 20, Elapsed: time.Second}}},
		{{Drive: Drive{Decisions: 10, Elapsed: time.Second}}, {Drive: Drive{Decisions: 10, Elapsed: time.Second}}, {Drive: Drive{Decisions: 10, Elapsed: time.Second}}},
	}}
	if r := res.Ratio(0, 1, rate); r.Median != 2 || r.Min != 1 || r.Max != 3 || !r.OK {
		t.Errorf("ratio %+v; want median 2 in 1..3 (per-round ratios)", r)
	}
}
