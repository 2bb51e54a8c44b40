package benchmarks

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/backend/rueidisstore"
	"github.com/limitkit/limitkit/internal/dev/benchmarks/harness"
	"github.com/limitkit/limitkit/limiter"
)

// The reservation cell: ReserveN of reserveEstimate, then Settle at
// reserveActual (a refund), against one AllowN of reserveEstimate, on
// sliding_log's never-deny rule.
const (
	reserveEstimate = 4
	reserveActual   = 2
)

// reserveDecider decides through a limiter on s: AllowN, or ReserveN and
// Settle when reserve is set.
func reserveDecider(s backend.Store, w Workload, reserve bool) (Decider, error) {
	rule := w.Rule(algorithms.SlidingLog)
	l, err := limiter.New(s, limiter.Config{Algorithm: rule.Algorithm, Limit: rule.Limit, Window: rule.Window, Prefix: "bench:"})
	if err != nil {
		return nil, err
	}
	if !reserve {
		return func(ctx context.Context, id string) (bool, error) {
			d, err := l.AllowN(ctx, id, reserveEstimate)
			return d.Allowed, err
		}, nil
	}
	return func(ctx context.Context, id string) (bool, error) {
		r, d, err := l.ReserveN(ctx, id, reserveEstimate)
		if err != nil || r == nil {
			return d.Allowed, err
		}
		_, err = r.Settle(ctx, reserveActual)
		return true, err
	}, nil
}

// reserveContenders are AllowN and ReserveN+Settle on each client.
func reserveContenders(addr string) []Contender {
	var cs []Contender
	for _, reserve := range []bool{false, true} {
		name := map[bool]string{false: "AllowN", true: "ReserveN+Settle"}[reserve]
		cs = append(cs,
			Contender{Name: "go-redis " + name, Group: "limitkit", Client: "go-redis", Algorithm: algorithms.SlidingLog,
				New: func(w Workload) (Decider, func(), error) {
					c, err := harness.NewGoRedis(harness.GoRedisOptions(addr))
					if err != nil {
						return nil, nil, err
					}
					s, err := goredisstore.New(c)
					if err != nil {
						_ = c.Close()
						return nil, nil, err
					}
					d, err := reserveDecider(s, w, reserve)
					return d, func() { _ = c.Close() }, err
				}},
			Contender{Name: "rueidis " + name, Group: "limitkit", Client: "rueidis", Algorithm: algorithms.SlidingLog,
				New: func(w Workload) (Decider, func(), error) {
					c, err := rueidis.NewClient(harness.RueidisOptions(addr))
					if err != nil {
						return nil, nil, err
					}
					s, err := rueidisstore.New(c)
					if err != nil {
						c.Close()
						return nil, nil, err
					}
					d, err := reserveDecider(s, w, reserve)
					return d, c.Close, err
				}},
		)
	}
	return cs
}

// TestReserveSettleCost measures, on the harness's Redis at steady state
// (each cell on an emptied server, 1 s warm-up, 2 s measured, 8 callers,
// rounds interleaved), the script µs and the script calls (round trips)
// per ReserveN+Settle against one AllowN on each client, and reports the
// medians and the per-round ratios. LIMITKIT_BENCH_RESERVE=N runs it with
// N rounds (at least 3); without it the test is skipped (about 12 s a
// round).
func TestReserveSettleCost(t *testing.T) {
	rounds := 0
	if _, err := fmt.Sscan(os.Getenv("LIMITKIT_BENCH_RESERVE"), &rounds); err != nil || rounds < 3 {
		t.Skip("set LIMITKIT_BENCH_RESERVE to a number of rounds, 3 or more")
	}
	s := needServer(t)
	ctx := context.Background()
	w := RedisWorkloads(time.Second)[0]
	cs := reserveContenders(s.Addr())
	usec := map[string][]float64{}
	calls := map[string][]float64{}
	for round := range rounds {
		for _, c := range harness.Rotate(cs, round, rounds) {
			if err := s.FlushAll(ctx); err != nil {
				t.Fatal(err)
			}
			cell, err := Prepare(ctx, c, w)
			if err != nil {
				t.Fatal(err)
			}
			if err := Warm(ctx, cell, 8, time.Second); err != nil {
				cell.Close()
				t.Fatal(err)
			}
			sample, err := MeasureRedis(ctx, cell, s, 8, 2*time.Second)
			cell.Close()
			if err != nil {
				t.Fatal(err)
			}
			usec[c.Name] = append(usec[c.Name], sample.PerDecision(float64(sample.ScriptUsec)))
			calls[c.Name] = append(calls[c.Name], sample.PerDecision(float64(sample.ScriptCalls)))
		}
	}
	var rows [][]string
	for _, client := range []string{"go-redis", "rueidis"} {
		a, r := client+" AllowN", client+" ReserveN+Settle"
		ru, rc := harness.RatioOf(usec[r], usec[a]), harness.RatioOf(calls[r], calls[a])
		rows = append(rows, []string{client,
			fmt.Sprintf("%.2f", harness.Median(usec[a])), fmt.Sprintf("%.2f", harness.Median(usec[r])),
			fmt.Sprintf("%.2f× (%.2f–%.2f)", ru.Median, ru.Min, ru.Max),
			fmt.Sprintf("%.2f", harness.Median(calls[a])), fmt.Sprintf("%.2f", harness.Median(calls[r])),
			fmt.Sprintf("%.2f×", rc.Median)})
	}
	var b strings.Builder
	harness.WriteTable(&b, "lrrrrrr", []string{"client", "AllowN script µs", "reserve+settle script µs", "CPU ratio (min–max)",
		"AllowN round trips", "reserve+settle round trips", "round-trip ratio"}, rows)
	t.Logf("%d rounds, sliding_log, %d keys, estimate %d settled at %d:\n%s", rounds, w.Keys, reserveEstimate, reserveActual, b.String())
}
