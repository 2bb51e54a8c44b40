package redisengine_test

// Every algorithm driven straight through its script, refunds included,
// against miniredis and a real redis-server, and compared with the Go
// engine; and the memory the newer algorithms' keys take.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/storetest"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/internal/dev/scripttest"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// stepper runs one algorithm's script in each mode.
type stepper struct {
	client *redis.Client
	src    map[algorithms.Name]string
}

func newStepper(t *testing.T, addr string) *stepper {
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	s := &stepper{client: c, src: map[algorithms.Name]string{}}
	for _, name := range algorithms.Names() {
		s.src[name] = scripttest.Source(t, name)
	}
	return s
}

// run sends args to rule's script on key and returns its outcome and where
// it recorded an admission.
func (s *stepper) run(ctx context.Context, rule algorithms.Rule, key string, args []string) (algorithms.Outcome, int64, error) {
	a := make([]any, len(args))
	for i, v := range args {
		a[i] = v
	}
	raw, err := s.client.Eval(ctx, s.src[rule.Algorithm], []string{key}, a...).Int64Slice()
	if err != nil {
		return algorithms.Outcome{}, 0, err
	}
	out, err := rediswire.Decode(rule, raw)
	if err != nil {
		return algorithms.Outcome{}, 0, err
	}
	return out, raw[rediswire.ReplyAt], nil
}

// admission is a take to refund later.
type admission struct{ at, cost int64 }

// differentialWithRefunds replays random takes, peeks and refunds (of the
// latest admission on a key, or of an older one after others) on the
// scripts and on the Go engine, with the clock creeping, jumping back and
// forward, and the limit and window changing under the keys, and fails at
// the first difference.
func differentialWithRefunds(t *testing.T, s *stepper, seed uint64, steps int) {
	ctx := t.Context()
	rng := rand.New(rand.NewPCG(seed, 99))
	run := fmt.Sprintf("newalg:%d:%d:", seed, time.Now().UnixNano())
	windows := []time.Duration{time.Millisecond, 7 * time.Millisecond, time.Second, 1500 * time.Millisecond,
		time.Hour, algorithms.MaxWindow}
	limits := []int64{1, 2, 3, 4, 7, 100, 128, 2000, algorithms.MaxSlidingLogLimit, 1 << 20, algorithms.MaxLimit}
	starts := []int64{0, 1, 1_767_225_600_000, 1_767_225_600_000 + 123_457,
		rediswire.MaxTime - 2*algorithms.MaxWindow.Milliseconds()}
	pick := func(rule *algorithms.Rule) {
		rule.Window = windows[rng.IntN(len(windows))]
		rule.Limit = min(limits[rng.IntN(len(limits))], rule.LimitBound())
	}
	checked := map[string]int{}
	for round, step := 0, 0; step < steps; round++ {
		names := algorithms.Names()
		rule := algorithms.Rule{Algorithm: names[round%len(names)]}
		pick(&rule)
		states := map[string]*algorithms.State{}
		taken := map[string][]admission{}
		now := starts[rng.IntN(len(starts))] + rng.Int64N(3*rule.Window.Milliseconds()+1)
		latest := now
		for range 1 + rng.IntN(80) {
			step++
			if rng.IntN(25) == 0 {
				w := rule.Window
				pick(&rule)
				if rule.PerWindow() {
					// A fixed window's keys are named by the window's start
					// alone: windows of other lengths starting at the same
					// ms share a count in Redis, which the Go engine (two
					// windows kept) does not model. Its limit changes only.
					rule.Window = w
				}
			}
			now = scripttest.WalkTime(rng, now, rule.Window.Milliseconds(), 3)
			if rule.PerWindow() {
				// Never back: refunds of older admissions reach windows the
				// Go engine no longer keeps (the suites cover the window
				// before).
				now = max(now, storetest.FixedWindowFloor(latest, 0))
			}
			latest = max(latest, now)
			if rule.HoldsLeases() {
				now = min(now, algorithms.MaxLeaseMillis) // lease ids count 1/1000 ms
			}
			id := []string{"a", "b"}[rng.IntN(2)]
			key := fmt.Sprintf("%s%d:{%s}", run, round, id) + rule.KeySuffix()
			st := states[id]
			if st == nil {
				st = &algorithms.State{}
				states[id] = st
			}
			cost := int64(1)
			switch p := rng.IntN(10); {
			case p < 5:
			case p < 7:
				cost = rule.Limit
			default:
				cost = 1 + rng.Int64N(rule.Limit)
			}
			var args []string
			var want algorithms.Outcome
			op := "Take"
			switch p := rng.IntN(100); {
			case p < 20 && len(taken[id]) > 0:
				// Refund the latest admission, or now and then an older one.
				i := len(taken[id]) - 1
				if rng.IntN(3) == 0 {
					i = rng.IntN(len(taken[id]))
				}
				a := taken[id][i]
				taken[id] = append(taken[id][:i], taken[id][i+1:]...)
				op, cost = fmt.Sprintf("Refund(at %d)", a.at), min(a.cost, rule.Limit)
				want = rule.Refund(st, now, a.at, cost)
				args = rediswire.RefundArgs(rule, now, a.at, cost)
			case p < 40:
				op = "Peek"
				want = rule.Peek(st, now, cost)
				args = scripttest.Args(t, rule, now, cost, rediswire.ModePeek)
			default:
				want = rule.Take(st, now, cost)
				args = scripttest.Args(t, rule, now, cost, rediswire.ModeTake)
			}
			got, at, err := s.run(ctx, rule, key, args)
			what := fmt.Sprintf("round %d step %d: %s(%s, %+v, now %d, cost %d)", round, step, op, id, rule, now, cost)
			require.NoError(t, err, what)
			require.Equal(t, want, got, what)
			if op == "Take" && want.Allowed {
				require.Equal(t, rule.ChargedAt(st, now), at, "%s: where the take was recorded", what)
				taken[id] = append(taken[id], admission{at, cost})
			}
			checked[op[:4]+"/"+string(rule.Algorithm)]++
		}
	}
	for _, name := range algorithms.Names() {
		for _, op := range []string{"Take", "Peek", "Refu"} {
			require.Positive(t, checked[op+"/"+string(name)], "%s: no %s checked", name, op)
		}
	}
}

// TestScriptStepsMatchGoMiniredis runs one seed, and the three of the soak
// with LIMITKIT_SOAK=1 (.ci/run's soak step): miniredis's Lua under the
// race detector takes about 20 s a seed on a loaded 2-core machine, and
// TestScriptStepsMatchGoRedis runs three seeds on redis-server's.
func TestScriptStepsMatchGoMiniredis(t *testing.T) {
	// Parallel: CPU-bound, on a server of its own, and it sets none of
	// export_test.go's controls (the serial tests that do end first).
	t.Parallel()
	mr := miniredis.RunT(t)
	s := newStepper(t, mr.Addr())
	seeds := uint64(1)
	if os.Getenv("LIMITKIT_SOAK") == "1" {
		seeds = 3
	}
	for seed := range seeds {
		differentialWithRefunds(t, s, seed, 1500)
	}
}

func TestScriptStepsMatchGoRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s := newStepper(t, srv.Addr())
	for seed := range uint64(3) {
		differentialWithRefunds(t, s, 100+seed, 2000)
	}
}

// TestRefundNeverCreatesAllowance takes on a key, lets other admissions
// follow, refunds the first take, and checks that the key is never
// fuller than if the refunded take had never happened, on both engines.
func TestRefundNeverCreatesAllowance(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	s := newStepper(t, mr.Addr())
	rng := rand.New(rand.NewPCG(5, 5))
	for _, name := range algorithms.Names() {
		for round := range 200 {
			rule := algorithms.Rule{Algorithm: name, Limit: int64(2 + rng.IntN(9)), Window: time.Duration(20+rng.IntN(50)) * time.Millisecond}
			w := rule.Window.Milliseconds()
			key := fmt.Sprintf("refund:%s:%d", name, round) + rule.KeySuffix()
			var with, without algorithms.State
			now := int64(1_000_000)
			// The key without the refunded take: the same admissions, on
			// the same algorithm, or, for two_level (whose light keys
			// count more conservatively than its heavy ones), on the exact
			// log it never admits more than.
			exact := rule
			if name == algorithms.TwoLevel {
				exact.Algorithm = algorithms.SlidingLog
			}
			// Some history on both.
			for range rng.IntN(6) {
				now += rng.Int64N(w)
				c := 1 + rng.Int64N(rule.Limit)
				if rule.Take(&with, now, c).Allowed {
					exact.Take(&without, now, c)
				}
				_, _, err := s.run(t.Context(), rule, key, scripttest.Args(t, rule, now, c, rediswire.ModeTake))
				require.NoError(t, err)
			}
			now += rng.Int64N(w)
			c := 1 + rng.Int64N(rule.Limit)
			out := rule.Take(&with, now, c)
			lua, at, err := s.run(t.Context(), rule, key, scripttest.Args(t, rule, now, c, rediswire.ModeTake))
			require.NoError(t, err)
			require.Equal(t, out, lua)
			if !out.Allowed {
				continue
			}
			require.Equal(t, rule.ChargedAt(&with, now), at)
			// Others follow; those admitted happen without it too.
			for range rng.IntN(4) {
				now += rng.Int64N(w / 2)
				if rule.Take(&with, now, 1).Allowed {
					exact.Take(&without, now, 1)
				}
				_, _, err := s.run(t.Context(), rule, key, scripttest.Args(t, rule, now, 1, rediswire.ModeTake))
				require.NoError(t, err)
			}
			got := rule.Refund(&with, now, at, c)
			lua, _, err = s.run(t.Context(), rule, key, rediswire.RefundArgs(rule, now, at, c))
			require.NoError(t, err)
			require.Equal(t, got, lua)
			// From here on, with the refund is never more permissive.
			for d := int64(0); d <= 3*w; d++ {
				a, b := rule.Peek(&with, now+d, 1), exact.Peek(&without, now+d, 1)
				require.LessOrEqual(t, a.Remaining, b.Remaining, "%s round %d: refund created allowance at +%d ms\nwith %+v\nwithout %+v", name, round, d, with, without)
			}
		}
	}
}

// keyMemory takes cost-1 units one per millisecond until n are admitted
// and returns MEMORY USAGE of the key.
func keyMemory(t *testing.T, srv *redistest.Server, store backend.Store, key backend.Key, rule algorithms.Rule, n int, start int64) (int64, string) {
	for i := range n {
		res, err := store.Take(t.Context(), backend.Request{Key: key, Rule: rule, Now: time.UnixMilli(start + int64(i)), Cost: 1})
		require.NoError(t, err)
		require.True(t, res.Allowed, "take %d of %d", i+1, n)
	}
	return scripttest.MemoryUsage(t, srv, rediswire.Key(key, rule))
}

// TestKeyMemoryUsage measures MEMORY USAGE of a key after L
// admissions at limit L, for the sorted-set log and the compact log, and of
// a two-level key light and heavy, and a GCRA key; it holds the compact
// log to its targets (1,000 bytes at L=100, 9,000 at L=1000).
func TestKeyMemoryUsage(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	store := stores(t, srv, nil, nil)[0]
	prefix := fmt.Sprintf("newmem:%d:", time.Now().UnixMilli())
	start := time.Now().UnixMilli()
	var table strings.Builder
	fmt.Fprintf(&table, "| L | sliding_log | compact_log | two_level (heavy) |\n|---|---|---|---|\n")
	for _, l := range []int{10, 100, 127, 128, 1000, 10_000} {
		row := []string{strconv.Itoa(l)}
		for _, name := range []algorithms.Name{algorithms.SlidingLog, algorithms.CompactLog, algorithms.TwoLevel} {
			rule := algorithms.Rule{Algorithm: name, Limit: int64(l), Window: time.Hour}
			bytes, enc := keyMemory(t, srv, store, backend.Key{Prefix: prefix, ID: strconv.Itoa(l)}, rule, l, start)
			row = append(row, fmt.Sprintf("%d B (%s)", bytes, enc))
			if name == algorithms.CompactLog {
				switch l {
				case 100:
					require.LessOrEqual(t, bytes, int64(1000), "compact_log key at L=100")
				case 1000:
					require.LessOrEqual(t, bytes, int64(9000), "compact_log key at L=1000")
				}
			}
		}
		fmt.Fprintf(&table, "| %s |\n", strings.Join(row, " | "))
	}
	for _, name := range []algorithms.Name{algorithms.TwoLevel, algorithms.GCRA, algorithms.SlidingCounter} {
		rule := algorithms.Rule{Algorithm: name, Limit: 100, Window: time.Hour}
		bytes, enc := keyMemory(t, srv, store, backend.Key{Prefix: prefix, ID: "light"}, rule, 10, start)
		fmt.Fprintf(&table, "%s key after 10 of 100: %d B (%s)\n", name, bytes, enc)
		if name == algorithms.TwoLevel {
			require.LessOrEqual(t, bytes, int64(150), "a light two-level key is a small string")
		}
	}
	t.Logf("MEMORY USAGE on redis-server:\n%s", table.String())
}
