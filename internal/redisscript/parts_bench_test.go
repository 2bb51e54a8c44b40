package redisscript_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/internal/redisscript"
	"github.com/limitkit/limitkit/internal/testing/redistest"
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
//	compact_log:  the real step;
//	seed:         the seed article's script (4 calls), one call per decision.
//
// go test -run x -bench CompactLogParts -benchtime 1x ./internal/redisscript/
//
// Under valgrind the same variants give instruction counts that do not
// move with the machine's load: run a redis-server under
// valgrind --tool=callgrind, set LIMITKIT_PARTS_ADDR to its address and
// LIMITKIT_PARTS_N to a few thousand, and zero/dump its counters around each
// variant with callgrind_control.
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
	batch := redisscript.BatchScript()
	real, err := os.ReadFile("../../algorithms/loglib.lua")
	require.NoError(b, err)
	body, err := os.ReadFile("../../algorithms/compact_log.lua")
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
	}{
		{"return1", "return 1", 1, false},
		{"const-1", withStep("return {1, 0, 0, 0, now}\n"), 1, false},
		{"const-16", withStep("return {1, 0, 0, 0, now}\n"), 16, false},
		{"getrange-16", withStep("local first = redis.call('GETRANGE', key, '0', '238')\nreturn {1, 0, 0, 0, now}\n"), 16, false},
		{"rw-16", withStep("local first = redis.call('GETRANGE', key, '0', '238')\nredis.call('SET', key, first, 'PX', '3000')\nreturn {1, 0, 0, 0, now}\n"), 16, false},
		{"compact_log", batch, 16, false},
		{"seed", seed, 1, true},
	}
	const keys, window, perKey = 10_000, 1000, 5
	rate := float64(keys*perKey) / window // decisions per virtual ms
	start := time.Now().UnixMilli()
	// drive sends n decisions, perCall a call, pipelined from 3 connections,
	// advancing the virtual clock.
	drive := func(sha string, perCall, n int, seedArgs bool, clock *float64, seq *int) {
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
			for range perCall {
				id := rng.IntN(keys)
				*seq++
				if seedArgs {
					cl.keys = append(cl.keys, fmt.Sprintf("seed:{user:%d}", id))
					cl.args = append(cl.args, now, strconv.Itoa(*seq), strconv.Itoa(window), "10000", "1")
				} else {
					cl.keys = append(cl.keys, fmt.Sprintf("p:{user:%d}:cl", id))
					cl.args = append(cl.args, now, "compact_log", strconv.Itoa(window), "10000", "1")
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
	const rounds = 3
	got := make([][]float64, len(variants))
	for b.Loop() {
		for range rounds {
			for i, v := range variants {
				require.NoError(b, c.FlushAll(ctx).Err())
				realSHA, err := c.ScriptLoad(ctx, batch).Result()
				require.NoError(b, err)
				sha, err := c.ScriptLoad(ctx, v.src).Result()
				require.NoError(b, err)
				clock, seq := 0.0, 0
				// Two windows of the real script (or of the seed's) first:
				// every key at its steady contents.
				if v.seed {
					drive(sha, 1, 2*keys*perKey, true, &clock, &seq)
				} else {
					drive(realSHA, 16, 2*keys*perKey, false, &clock, &seq)
				}
				cpu0 := serverCPU(ctx, b, c)
				drive(sha, v.perCall, decisions, v.seed, &clock, &seq)
				cpu1 := serverCPU(ctx, b, c)
				got[i] = append(got[i], (cpu1-cpu0)*1e6/float64(decisions))
			}
		}
	}
	for i, v := range variants {
		b.Logf("%-12s server CPU µs/decision %5.2f (median of %d: %.2f)", v.name, median(got[i]), len(got[i]), got[i])
		b.ReportMetric(median(got[i]), v.name+"-µs/decision")
	}
	// The real step decides: a take on a fresh key is admitted.
	v, err := c.EvalSha(context.WithoutCancel(ctx), mustLoad(b, c, batch), []string{"p:{fresh}:cl"}, start, "compact_log", window, 10, 1).Int64Slice()
	require.NoError(b, err)
	require.Equal(b, int64(1), v[0])
}

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
