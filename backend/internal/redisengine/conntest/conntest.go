// Package conntest checks a Redis store's adapter of its client library
// to redisengine.Conn: malformed replies are errors, never panics, and a
// batch reports each request's failure on its own.
package conntest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend/internal/redisengine"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// RejectsMalformedReplies runs scripts that reply with the wrong shapes
// through a store's adapter: each is an error wrapping ErrBadReply, or the
// script's own error, never a panic.
func RejectsMalformedReplies(t *testing.T, a redisengine.Conn) {
	t.Helper()
	bad := []string{
		"return nil",
		"return 'x'",
		"return {1, 'a', 3, 4}",
		"return {1, {2}, 3, 4}",
		"return {ok = 'fine'}",
	}
	for _, src := range bad {
		_, err := a.Eval(t.Context(), redisengine.Eval, src, []string{"k"}, nil)
		require.ErrorIs(t, err, rediswire.ErrBadReply, src)
	}
	_, err := a.Eval(t.Context(), redisengine.Eval, "return redis.error_reply('boom')", []string{"k"}, nil)
	require.ErrorContains(t, err, "boom")
	require.NotErrorIs(t, err, rediswire.ErrBadReply)
	vals, err := a.Eval(t.Context(), redisengine.EvalRO, "return {1, 2, 3, 4, 5}", []string{"k"}, nil)
	require.NoError(t, err) // the runner, not the adapter, checks the length
	require.Equal(t, []int64{1, 2, 3, 4, 5}, vals)

	_, err = a.Eval(t.Context(), redisengine.EvalSHA, "0000000000000000000000000000000000000000", []string{"k"}, nil)
	require.True(t, a.IsNoScript(err), "%v", err)
	require.False(t, a.IsNoScript(rediswire.ErrBadReply))
	require.NoError(t, a.Del(t.Context(), "k"))
}

// Server sends a command to the Redis the adapter is connected to (a
// *redistest.Server does): an interface, so that this package, which
// ships under backend/, imports nothing of the dev wing (internal/dev).
type Server interface {
	Do(args ...string) (string, error)
}

// BatchReplies runs the batch script through a store's adapter on srv:
// four takes, the second on a key of the wrong type, the third naming no
// algorithm the script knows, the fourth under another rule. The second
// and third fail alone, with the server's error; the others are decided as
// single takes would be, each under its own rule.
func BatchReplies(t *testing.T, a redisengine.Conn, srv Server) {
	t.Helper()
	_, err := srv.Do("SET", "batch:bad", "a string")
	require.NoError(t, err)
	rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 10, Window: time.Minute}
	other := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 5, Window: 30 * time.Second}
	now := time.Now().UnixMilli()
	var args []string
	var buf []byte
	for range 3 {
		args, buf = rediswire.BatchArgs(args, buf, rule, now, 1)
	}
	args, _ = rediswire.BatchArgs(args, buf, other, now, 2)
	args[2*5+1] = "no_such_algorithm"
	keys := []string{"batch:a", "batch:bad", "batch:c", "batch:d"}
	vals, errs, err := a.EvalBatch(t.Context(), redisengine.Eval, rediswire.BatchScript(), keys, args)
	require.NoError(t, err)
	require.Len(t, vals, 4*rediswire.ReplyLen)
	require.Len(t, errs, 4*rediswire.ReplyLen)
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
	vals, errs, err = a.EvalBatch(t.Context(), redisengine.Eval, rediswire.BatchScript(), keys[:1], args[:5])
	require.NoError(t, err)
	require.Nil(t, errs)
	require.Equal(t, []int64{1, 8, 0, rule.Window.Milliseconds(), now}, vals)
}
