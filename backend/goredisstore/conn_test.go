package goredisstore

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/internal/redisscript"
)

// TestConnMalformedReplies runs scripts that reply with the wrong shapes
// through the adapter: each is an error wrapping ErrBadReply, or the
// script's own error, never a panic.
func TestConnMalformedReplies(t *testing.T) {
	mr := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	a := conn{client}
	bad := []string{
		"return nil",
		"return 'x'",
		"return {1, 'a', 3, 4}",
		"return {1, {2}, 3, 4}",
		"return {ok = 'fine'}",
	}
	for _, src := range bad {
		_, err := a.Eval(t.Context(), redisscript.Eval, src, "k", nil)
		require.ErrorIs(t, err, redisscript.ErrBadReply, src)
	}
	_, err := a.Eval(t.Context(), redisscript.Eval, "return redis.error_reply('boom')", "k", nil)
	require.ErrorContains(t, err, "boom")
	require.NotErrorIs(t, err, redisscript.ErrBadReply)
	vals, err := a.Eval(t.Context(), redisscript.EvalRO, "return {1, 2, 3, 4, 5}", "k", nil)
	require.NoError(t, err) // the runner, not the adapter, checks the length
	require.Equal(t, []int64{1, 2, 3, 4, 5}, vals)

	_, err = a.Eval(t.Context(), redisscript.EvalSHA, "0000000000000000000000000000000000000000", "k", nil)
	require.True(t, a.IsNoScript(err), "%v", err)
	require.False(t, a.IsNoScript(redisscript.ErrBadReply))
	require.NoError(t, a.Del(t.Context(), "k"))
}
