package redisengine_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// BenchmarkCompactLogParts splits the server's CPU per never-deny
// compact_log decision into parts: the batch script (16 takes a call, as
// the stores send them) with compact_log's step replaced by less and less
// of it, beside the seed article's script and EVALSHA of "return 1". The
// workload is the steady state of the comparison harness on a virtual
// clock (so no cell waits and keys never expire mid-run): 10,000 keys, a
// window of 1 s, 5 takes per key per window, each key holding its last two
// windows, entries sliding out at every take. It reports the median over
// rounds of the server's CPU µs per decision (INFO cpu, the whole server
// process) per variant:
//
//	return1:      EVALSHA "return 1", one call per decision (the floor);
//	const-1:      the batch script, 1 take a call, the step returning at once;
//	const-16:     the same, 16 takes a call: what a take costs outside its step;
//	getrange-16:  the step reads the log (GETRANGE) and returns;
//	rw-16:        the step reads and writes it back (GETRANGE, SET PX);
//	compact_log:  the real step, five values per take;
//	shared-16:    the same, the rule's values and now sent once a call
//	              (SharedBatchArgs when the takes share now);
//	sharednow-16: the same, the rule's values once and now per take
//	              (SharedBatchArgs when they do not);
//	seed:         the seed article's script (4 calls), one call per decision.
//
// go test -run x -bench CompactLogParts -benchtime 1x ./backend/internal/redisengine/
//
// Under valgrind the same variants give instruction counts that do not
// move with the machine's load: run a redis-server under
// valgrind --tool=callgrind --instr-atstart=no, set LIMITKIT_PARTS_ADDR to
// its address, LIMITKIT_PARTS_N to a few thousand and
// LIMITKIT_PARTS_CALLGRIND to its pid; the benchmark then collects only
// around each variant's measured decisions (callgrind_control -i) and
// reports instructions per decision, from one round. Set
// LIMITKIT_PARTS_WINDOW_MS=60000 then, so that no key expires in real time. LIMITKIT_PARTS_ONLY, a
// regular expression, picks variants.
func BenchmarkCompactLogParts(b *testing.B) {
	addr := os.Getenv("LIMITKIT_PARTS_ADDR")
	if addr == "" {
		addr = redistest.Start(b).Addr()
	}
	c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 5 * time.Minute, PoolSize: 8})
	b.Cleanup(func() { _ = c.Close() })
	ctx := b.Context()
	decisions := 50_000
	if s := os.Getenv("LIMITKIT_PARTS_N"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(b, err, "LIMITKIT_PARTS_N")
		decisions = n
	}
	batch := rediswire.BatchScript()
	real, err := os.ReadFile("../../../algorithms/loglib.lua")
	require.NoError(b, err)
	body, err := os.ReadFile("../../../algorithms/compact_log.lua")
	require.NoError(b, err)
	realBody := string(real) + string(body)
	require.Contains(b, batch, realBody, "the batch script no longer holds compact_log's step as written")
	withStep := func(step string) string { return strings.Replace(batch, realBody, step, 1) }
	const seed = `local now = tonumber(ARGV[1])
local window = tonumber(ARGV[3])
local limit = tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) < limit then
  redis.call('ZADD', KEYS[1], now, ARGV[2])
  redis.call('PEXPIRE', KEYS[1], window)
  return 1
end
return 0`
	variants := []struct {
		name, src string
		perCall   int
		seed      bool
		// args: how a call's ARGV is laid out (see SharedBatchArgs).
		args argLayout
	}{
		{"return1", "return 1", 1, false, perTake},
		{"const-1", withStep("return {1, 0, 0, 0, now}\n"), 1, false, perTake},
		{"const-16", withStep("return {1, 0, 0, 0, now}\n"), 16, false, perTake},
		{"getrange-16", withStep("local first = redis.call('GETRANGE', key, '0', '238')\nreturn {1, 0, 0, 0, now}\n"), 16, false, perTake},
		{"rw-16", withStep("local first = redis.call('GETRANGE', key, '0', '238')\nredis.call('SET', key, first, 'PX', '3000')\nreturn {1, 0, 0, 0, now}\n"), 16, false, perTake},
		{"compact_log", batch, 16, false, perTake},
		{"shared-16", batch, 16, false, allShared},
		{"sharednow-16", batch, 16, false, nowPerTake},
		{"seed", seed, 1, true, perTake},
	}
	const keys, perKey = 10_000, 5
	// Under valgrind, a window of a minute (LIMITKIT_PARTS_WINDOW_MS=60000)
	// keeps keys from expiring in the server's real time mid-run.
	window := 1000
	if s := os.Getenv("LIMITKIT_PARTS_WINDOW_MS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(b, err, "LIMITKIT_PARTS_WINDOW_MS")
		window = n
	}
	rate := float64(keys*perKey) / float64(window) // decisions per virtual ms
	start := time.Now().UnixMilli()
	// drive sends n decisions, perCall a call, pipelined from 3 connections,
	// advancing the virtual clock.
	drive := func(sha string, perCall, n int, seedArgs bool, layout argLayout, clock *float64, seq *int) {
		rng := rand.New(rand.NewPCG(1, uint64(n)))
		type call struct {
			keys []string
			args []any
		}
		calls := make(chan []call, 4)
		var wg sync.WaitGroup
		var errOnce sync.Once
		var sendErr error
		for range 3 {
			wg.Go(func() {
				for cs := range calls {
					_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
						for _, cl := range cs {
							p.EvalSha(ctx, sha, cl.keys, cl.args...)
						}
						return nil
					})
					if err != nil {
						errOnce.Do(func() { sendErr = err })
					}
				}
			})
		}
		var group []call
		for range n / perCall {
			now := strconv.FormatInt(start+int64(*clock), 10)
			*clock += float64(perCall) / rate
			var cl call
			switch layout {
			case allShared:
				cl.args = append(cl.args, now, "compact_log", strconv.Itoa(window), "10000", "1")
			case nowPerTake:
				cl.args = append(cl.args, "compact_log", strconv.Itoa(window), "10000", "1")
			}
			for range perCall {
				id := rng.IntN(keys)
				*seq++
				switch {
				case seedArgs:
					cl.keys = append(cl.keys, fmt.Sprintf("seed:{user:%d}", id))
					cl.args = append(cl.args, now, strconv.Itoa(*seq), strconv.Itoa(window), "10000", "1")
				case layout == perTake:
					cl.keys = append(cl.keys, fmt.Sprintf("p:{user:%d}:cl", id))
					cl.args = append(cl.args, now, "compact_log", strconv.Itoa(window), "10000", "1")
				default:
					cl.keys = append(cl.keys, fmt.Sprintf("p:{user:%d}:cl", id))
					if layout == nowPerTake {
						cl.args = append(cl.args, now)
					}
				}
			}
			group = append(group, cl)
			if len(group) == 64 {
				calls <- group
				group = nil
			}
		}
		if group != nil {
			calls <- group
		}
		close(calls)
		wg.Wait()
		require.NoError(b, sendErr)
	}
	rounds := 3
	cg := os.Getenv("LIMITKIT_PARTS_CALLGRIND")
	if cg != "" {
		rounds = 1
	}
	only := regexp.MustCompile(os.Getenv("LIMITKIT_PARTS_ONLY"))
	// collect turns callgrind's instrumentation on (its counters zeroed)
	// or off, then returning the instructions counted in all threads.
	collect := func(on bool) float64 {
		ctl := func(args ...string) []byte {
			out, err := exec.Command("callgrind_control", append(args, cg)...).CombinedOutput()
			require.NoError(b, err, "%s", out)
			return out
		}
		if on {
			ctl("-i", "on")
			ctl("-z")
			return 0
		}
		out := ctl("-e")
		ctl("-i", "off")
		n := 0.0
		for _, m := range regexp.MustCompile(`(?m)^\s*Th \d+\s+([\d,]+)`).FindAllSubmatch(out, -1) {
			v, err := strconv.ParseFloat(strings.ReplaceAll(string(m[1]), ",", ""), 64)
			require.NoError(b, err)
			n += v
		}
		require.NotZero(b, n, "no counts in %s", out)
		return n
	}
	got := make([][]float64, len(variants))
	instr := make([]float64, len(variants))
	for b.Loop() {
		for range rounds {
			for i, v := range variants {
				if !only.MatchString(v.name) {
					continue
				}
				require.NoError(b, c.FlushAll(ctx).Err())
				realSHA, err := c.ScriptLoad(ctx, batch).Result()
				require.NoError(b, err)
				sha, err := c.ScriptLoad(ctx, v.src).Result()
				require.NoError(b, err)
				clock, seq := 0.0, 0
				// Two windows of the real script (or of the seed's) first:
				// every key at its steady contents.
				if v.seed {
					drive(sha, 1, 2*keys*perKey, true, perTake, &clock, &seq)
				} else {
					drive(realSHA, 16, 2*keys*perKey, false, perTake, &clock, &seq)
				}
				if cg != "" {
					collect(true)
				}
				cpu0 := serverCPU(ctx, b, c)
				drive(sha, v.perCall, decisions, v.seed, v.args, &clock, &seq)
				cpu1 := serverCPU(ctx, b, c)
				if cg != "" {
					instr[i] = collect(false) / float64(decisions)
				}
				got[i] = append(got[i], (cpu1-cpu0)*1e6/float64(decisions))
			}
		}
	}
	for i, v := range variants {
		if len(got[i]) == 0 {
			continue
		}
		if cg != "" {
			b.Logf("%-12s instructions/decision %.0f", v.name, instr[i])
			b.ReportMetric(instr[i], v.name+"-instr/decision")
		}
		b.Logf("%-12s server CPU µs/decision %5.2f (median of %d: %.2f)", v.name, median(got[i]), len(got[i]), got[i])
		b.ReportMetric(median(got[i]), v.name+"-µs/decision")
	}
	// The real step decides: a take on a fresh key is admitted.
	v, err := c.EvalSha(context.WithoutCancel(ctx), mustLoad(b, c, batch), []string{"p:{fresh}:cl"}, start, "compact_log", window, 10, 1).Int64Slice()
	require.NoError(b, err)
	require.Equal(b, int64(1), v[0])
}

// argLayout is how a batch call's ARGV is laid out: five values per take,
// or the rule's values once (SharedBatchArgs) with now once or per take.
type argLayout uint8

const (
	perTake argLayout = iota
	allShared
	nowPerTake
)

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func mustLoad(b *testing.B, c *redis.Client, src string) string {
	sha, err := c.ScriptLoad(b.Context(), src).Result()
	require.NoError(b, err)
	return sha
}
