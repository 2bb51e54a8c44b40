package redisengine_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// TestSharedBatchArgsDecideAsPerTake sends random batches twice, on twin
// keys: five values per take (BatchArgs) and the rule's values once
// (SharedBatchArgs, now once or per take), on one server's and on a
// cluster node's form of the batch script. Every reply, stored value and
// expiry must match. The control reads SharedBatchArgs' layout as five
// values per take and must be caught.
func TestSharedBatchArgsDecideAsPerTake(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	batch := rediswire.BatchScript()
	for _, form := range []struct {
		name    string
		src     string
		cluster bool
	}{{"server", batch, false}, {"cluster", rediswire.ClusterBatchScript(batch), true}} {
		t.Run(form.name, func(t *testing.T) {
			require.NoError(t, compareShared(t.Context(), c, form.src, form.cluster, 11, 400))
		})
	}
	t.Run("control", func(t *testing.T) {
		// Without the layout check, a shared batch is read as five values
		// per take.
		const check = "elseif N > 1 and nargs == N + 4 then"
		require.Contains(t, batch, check, "the control's mutation no longer applies")
		err := compareShared(t.Context(), c, strings.Replace(batch, check, "elseif false then", 1), false, 12, 400)
		require.Error(t, err)
		t.Logf("caught: %v", err)
	})
}

// compareShared runs rounds random batches of src both ways and returns
// the first difference.
func compareShared(ctx context.Context, c *redis.Client, src string, cluster bool, seed uint64, rounds int) error {
	if err := c.FlushAll(ctx).Err(); err != nil {
		return err
	}
	sha, err := c.ScriptLoad(ctx, src).Result()
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	// Windows of a minute, the virtual clock moving by seconds: no key
	// expires in the server's (real) time while the test runs.
	rules := []algorithms.Rule{
		{Algorithm: algorithms.CompactLog, Limit: 5, Window: time.Minute},
		{Algorithm: algorithms.SlidingLog, Limit: 4, Window: 2 * time.Minute},
		{Algorithm: algorithms.FixedWindow, Limit: 6, Window: time.Minute},
		{Algorithm: algorithms.GCRA, Limit: 5, Window: time.Minute},
	}
	clock := time.Now().UnixMilli()
	// Both calls go in one MULTI between two reads of the server's clock:
	// the expiries they set (relative to the server's time) may differ by
	// no more than the time between those reads.
	both := func(a, perTake, b, shared []string) (want, got *redis.Cmd, slack int64) {
		if cluster {
			a, perTake = rediswire.ClusterBatchCall(nil, a, perTake)
			b, shared = rediswire.ClusterBatchCall(nil, b, shared)
		}
		var t0, t1 *redis.TimeCmd
		_, _ = c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			t0 = p.Time(ctx)
			want = p.EvalSha(ctx, sha, a, toAny(perTake)...)
			got = p.EvalSha(ctx, sha, b, toAny(shared)...)
			t1 = p.Time(ctx)
			return nil
		})
		return want, got, t1.Val().Sub(t0.Val()).Milliseconds() + 1
	}
	var slack int64
	for round := range rounds {
		n := 2 + rng.IntN(15)
		rule, cost := rules[rng.IntN(len(rules))], int64(1+rng.IntN(2))
		clock += int64(rng.IntN(18_000)) - 3000
		sameNow := rng.IntN(2) == 0
		nows := make([]int64, n)
		var perTake []string
		var buf []byte
		a, b := make([]string, n), make([]string, n)
		for i := range n {
			nows[i] = clock
			if !sameNow {
				nows[i] += int64(rng.IntN(6000)) - 3000
			}
			id := rng.IntN(8)
			a[i], b[i] = fmt.Sprintf("a:{%d}:%s", id, rule.Algorithm), fmt.Sprintf("b:{%d}:%s", id, rule.Algorithm)
			perTake, buf = rediswire.BatchArgs(perTake, buf, rule, nows[i], cost)
		}
		shared, _ := rediswire.SharedBatchArgs(nil, nil, rule, cost, n, func(i int) int64 { return nows[i] })
		if sameNow && len(shared) != 5 || !sameNow && len(shared) != n+4 && len(shared) != 5 {
			return fmt.Errorf("round %d: %d shared values for %d takes", round, len(shared), n)
		}
		wantCmd, gotCmd, s := both(a, perTake, b, shared)
		// A key not written this round keeps the expiry of an earlier one.
		slack = max(slack, s)
		want, err1 := wantCmd.Slice()
		got, err2 := gotCmd.Slice()
		what := fmt.Sprintf("round %d (%d takes of %s, cost %d, same now %v)", round, n, rule.Algorithm, cost, sameNow)
		if fmt.Sprint(want, err1) != fmt.Sprint(got, err2) {
			return fmt.Errorf("%s: per take %v %v, shared %v %v", what, want, err1, got, err2)
		}
		for i := range n {
			da, _ := c.Dump(ctx, a[i]).Result()
			db, _ := c.Dump(ctx, b[i]).Result()
			ta, tb := c.PExpireTime(ctx, a[i]).Val().Milliseconds(), c.PExpireTime(ctx, b[i]).Val().Milliseconds()
			if da != db || tb-ta > slack || ta-tb > slack {
				return fmt.Errorf("%s: key %d: states differ (%v) or expiries (%d ms, %d ms; slack %d ms)", what, i, da != db, ta, tb, slack)
			}
		}
	}
	return nil
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}
