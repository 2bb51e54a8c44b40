package scripttest

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/internal/redisscript"
	"github.com/limitkit/limitkit/internal/testing/redistest"
)

// EvalCalls returns how many EVAL (not EVALSHA) calls srv ran: the NOSCRIPT
// fallbacks of the runner.
func EvalCalls(t testing.TB, srv *redistest.Server) int { return CommandCalls(t, srv, "eval") }

// CommandCalls returns how many calls of the named command (lower case, as
// INFO commandstats spells it) srv ran.
func CommandCalls(t testing.TB, srv *redistest.Server, name string) int {
	t.Helper()
	stats, err := srv.Do("INFO", "commandstats")
	require.NoError(t, err)
	for _, line := range strings.Split(stats, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+name+":calls="); ok {
			n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			require.NoError(t, err)
			return n
		}
	}
	return 0
}

// BatchedTakesStayExact sends 1,600 Takes from 64 goroutines over 4 keys
// (limit 100 per minute each) through a store made with batching on srv:
// exactly 400 are admitted, 100 per key, and they reached Redis in fewer
// script calls than decisions, so batches did form.
func BatchedTakesStayExact(t *testing.T, s backend.Store, srv *redistest.Server) {
	t.Helper()
	rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 100, Window: time.Minute}
	now := time.Now()
	before := CommandCalls(t, srv, "evalsha")
	var mu sync.Mutex
	admitted := map[string]int{}
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			for i := range 25 {
				id := "user" + strconv.Itoa((g+i)%4)
				res, err := s.Take(t.Context(), backend.Request{Key: backend.Key{Prefix: "batched:", ID: id}, Rule: rule, Now: now, Cost: 1})
				if !assert.NoError(t, err) {
					return
				}
				if res.Allowed {
					mu.Lock()
					admitted[id]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, map[string]int{"user0": 100, "user1": 100, "user2": 100, "user3": 100}, admitted)
	calls := CommandCalls(t, srv, "evalsha") - before
	t.Logf("1600 decisions in %d script calls", calls)
	require.Less(t, calls, 1600, "no batch formed")
}

// ServerTimeProbe checks a store's TIME probe: it reads a clock near ours
// (same machine), an offset clock built on it is within a round trip of
// ours, and a cancelled context is an error.
func ServerTimeProbe(t *testing.T, probe func(context.Context) (time.Time, error)) {
	t.Helper()
	st, err := probe(t.Context())
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), st, time.Minute)
	o, err := clock.NewOffset(t.Context(), nil, probe, time.Hour)
	require.NoError(t, err)
	defer o.Close()
	// Same machine: the server's clock is ours, give or take the round trip.
	require.Less(t, o.Offset().Abs(), 5*time.Second)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = probe(ctx)
	require.Error(t, err)
}

// ConnRejectsMalformedReplies runs scripts that reply with the wrong shapes
// through a store's adapter: each is an error wrapping ErrBadReply, or the
// script's own error, never a panic.
func ConnRejectsMalformedReplies(t *testing.T, a redisscript.Conn) {
	t.Helper()
	bad := []string{
		"return nil",
		"return 'x'",
		"return {1, 'a', 3, 4}",
		"return {1, {2}, 3, 4}",
		"return {ok = 'fine'}",
	}
	for _, src := range bad {
		_, err := a.Eval(t.Context(), redisscript.Eval, src, []string{"k"}, nil)
		require.ErrorIs(t, err, redisscript.ErrBadReply, src)
	}
	_, err := a.Eval(t.Context(), redisscript.Eval, "return redis.error_reply('boom')", []string{"k"}, nil)
	require.ErrorContains(t, err, "boom")
	require.NotErrorIs(t, err, redisscript.ErrBadReply)
	vals, err := a.Eval(t.Context(), redisscript.EvalRO, "return {1, 2, 3, 4, 5}", []string{"k"}, nil)
	require.NoError(t, err) // the runner, not the adapter, checks the length
	require.Equal(t, []int64{1, 2, 3, 4, 5}, vals)

	_, err = a.Eval(t.Context(), redisscript.EvalSHA, "0000000000000000000000000000000000000000", []string{"k"}, nil)
	require.True(t, a.IsNoScript(err), "%v", err)
	require.False(t, a.IsNoScript(redisscript.ErrBadReply))
	require.NoError(t, a.Del(t.Context(), "k"))
}

// ConnBatchReplies runs the batch script through a store's adapter on srv:
// four takes, the second on a key of the wrong type, the third naming no
// algorithm the script knows, the fourth under another rule. The second
// and third fail alone, with the server's error; the others are decided as
// single takes would be, each under its own rule.
func ConnBatchReplies(t *testing.T, a redisscript.Conn, srv *redistest.Server) {
	t.Helper()
	_, err := srv.Do("SET", "batch:bad", "a string")
	require.NoError(t, err)
	rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 10, Window: time.Minute}
	other := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 5, Window: 30 * time.Second}
	now := time.Now().UnixMilli()
	var args []string
	var buf []byte
	for range 3 {
		args, buf = redisscript.BatchArgs(args, buf, rule, now, 1)
	}
	args, _ = redisscript.BatchArgs(args, buf, other, now, 2)
	args[2*5+1] = "no_such_algorithm"
	keys := []string{"batch:a", "batch:bad", "batch:c", "batch:d"}
	vals, errs, err := a.EvalBatch(t.Context(), redisscript.Eval, redisscript.BatchScript(), keys, args)
	require.NoError(t, err)
	require.Len(t, vals, 4*redisscript.ReplyLen)
	require.Len(t, errs, 4*redisscript.ReplyLen)
	admitted := []int64{1, 9, 0, rule.Window.Milliseconds(), now}
	require.Equal(t, admitted, vals[0:5])
	require.ErrorContains(t, errs[5], "WRONGTYPE")
	require.ErrorContains(t, errs[10], "no script step for algorithm no_such_algorithm")
	window := now - now%other.Window.Milliseconds()
	require.Equal(t, []int64{1, 3, 0, window + other.Window.Milliseconds() - now, window}, vals[15:20])
	for i, e := range errs {
		if i != 5 && i != 10 {
			require.NoError(t, e, "element %d", i)
		}
	}
	// Without failures there is no error slice.
	vals, errs, err = a.EvalBatch(t.Context(), redisscript.Eval, redisscript.BatchScript(), keys[:1], args[:5])
	require.NoError(t, err)
	require.Nil(t, errs)
	require.Equal(t, []int64{1, 8, 0, rule.Window.Milliseconds(), now}, vals)
}
