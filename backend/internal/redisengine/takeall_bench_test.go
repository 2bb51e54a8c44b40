package redisengine_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// BenchmarkTakeAllServerCPU is the server's side of a rate limit service
// request of three descriptors: a TakeAll of three never-denying limits
// (10,000 a second, 10,000 ids per descriptor), sent as the stores batch
// them (the groups script, 5 TakeAlls a call), with and without memo.lua,
// beside the reference server's algorithm for the same three counters (a
// pipeline of INCRBY and EXPIRE per descriptor, 5 requests per pipeline).
// One client sends call after call, so the server's CPU (INFO cpu) and the
// scripts' µs (INFO commandstats) per decision are the script's, not the
// load generator's. Rounds interleave the variants; it reports medians.
//
// Beside them, the parts of a fixed_window TakeAll's cost: the groups
// script with fixed_window's step reduced to its GET and SET ("minimal
// body") and to a constant outcome ("empty body": the script's own
// machinery, arguments and reply); the same keys and arguments to a
// script that only sends GET and SET per key ("raw"); the groups script
// called with no TakeAll (its definitions) and "return 1". For compact_log,
// the floor of its shape: a script that only sends its GETRANGE and SET
// per key ("raw GETRANGE+SET").
//
// go test -run x -bench TakeAllServerCPU -benchtime 1x ./backend/internal/redisengine/
func BenchmarkTakeAllServerCPU(b *testing.B) {
	srv := redistest.Start(b, redistest.WithArgs("--save", "", "--appendonly", "no"))
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	b.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	memo := rediswire.GroupsScript()
	undo := rediswire.WithoutMemo()
	plain := rediswire.GroupsScript()
	undo()
	const perCall, descs, ids, calls, rounds = 5, 3, 10_000, 4000, 3
	rng := rand.New(rand.NewPCG(1, 2))
	now := time.Now().UnixMilli()
	groups := func(src string, alg algorithms.Name) func() error {
		sha, err := c.ScriptLoad(ctx, src).Result()
		require.NoError(b, err)
		rule := algorithms.Rule{Algorithm: alg, Limit: 10_000, Window: time.Second}
		return func() error {
			var keys []string
			var args []string
			for range perCall {
				args = append(args, strconv.Itoa(descs), strconv.FormatInt(now, 10))
				for d := range descs {
					keys = append(keys, fmt.Sprintf("rl:%s:%c:{%d}", alg, 'a'+d, rng.IntN(ids)))
					args = rediswire.MultiArgs(args, rule, 1)
				}
			}
			return c.EvalSha(ctx, sha, keys, args).Err()
		}
	}
	reference := func() error {
		p := c.Pipeline()
		for range perCall {
			for d := range descs {
				k := fmt.Sprintf("ref_%c_%d_%d", 'a'+d, rng.IntN(ids), now/1000*1000)
				p.IncrBy(ctx, k, 1)
				p.Expire(ctx, k, time.Second)
			}
		}
		_, err := p.Exec(ctx)
		return err
	}
	empty := func(src string) func() error {
		sha, err := c.ScriptLoad(ctx, src).Result()
		require.NoError(b, err)
		return func() error { return c.EvalSha(ctx, sha, nil).Err() }
	}
	variants := []struct {
		name string
		call func() error
	}{
		{"fixed_window memo", groups(memo, algorithms.FixedWindow)},
		{"fixed_window plain", groups(plain, algorithms.FixedWindow)},
		{"raw GET+SET, same keys and arguments", groups("for i = 1, #KEYS do local v = redis.call('GET', KEYS[i]); redis.call('SET', KEYS[i], '1:2', 'PX', '2000') end return 1", algorithms.FixedWindow)},
		{"fixed_window minimal body", groups(strings.Replace(memo, algorithms.Lookup(algorithms.FixedWindow).Lua,
			"local v = redis.call('GET', key)\nif take then redis.call('SET', key, '1:2', 'PX', '2000') end\nreturn {1, 1, 0, 1000, 0}\n", 1), algorithms.FixedWindow)},
		{"fixed_window empty body", groups(strings.Replace(memo, algorithms.Lookup(algorithms.FixedWindow).Lua,
			"return {1, 1, 0, 1000, 0}\n", 1), algorithms.FixedWindow)},
		{"compact_log memo", groups(memo, algorithms.CompactLog)},
		{"compact_log plain", groups(plain, algorithms.CompactLog)},
		{"raw GETRANGE+SET, same keys and arguments", groups("for i = 1, #KEYS do local v = redis.call('GETRANGE', KEYS[i], '0', '238'); redis.call('SET', KEYS[i], '0123456789abcdefghijkl', 'PX', '2000') end return 1", algorithms.CompactLog)},
		{"sliding_log memo", groups(memo, algorithms.SlidingLog)},
		{"sliding_log plain", groups(plain, algorithms.SlidingLog)},
		{"reference INCRBY+EXPIRE", reference},
		{"groups script, no TakeAll", empty(memo)},
		{"return 1", empty("return 1")},
	}
	cpu := make([][]float64, len(variants))
	script := make([][]float64, len(variants))
	for range b.N {
		for r := range rounds {
			for k := range variants {
				i := (k + r) % len(variants)
				v := variants[i]
				for range calls / 4 { // warm-up: keys in their steady state
					require.NoError(b, v.call())
				}
				_, err := srv.Do("CONFIG", "RESETSTAT")
				require.NoError(b, err)
				before := serverStats(b, []*redistest.Server{srv})[0]
				for range calls {
					require.NoError(b, v.call())
				}
				after := serverStats(b, []*redistest.Server{srv})[0]
				decisions := float64(calls * perCall)
				cpu[i] = append(cpu[i], (after.cpu-before.cpu)*1e6/decisions)
				script[i] = append(script[i], float64(after.usec)/decisions)
			}
		}
	}
	for i, v := range variants {
		slices.Sort(cpu[i])
		slices.Sort(script[i])
		b.Logf("%-42s server CPU %5.1f µs/decision, EVALSHA %5.1f µs/decision", v.name, cpu[i][len(cpu[i])/2], script[i][len(script[i])/2])
	}
}
