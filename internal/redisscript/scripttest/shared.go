package scripttest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/internal/redisscript"
	"github.com/limitkit/limitkit/internal/redistest"
)

// EvalCalls returns how many EVAL (not EVALSHA) calls srv ran: the NOSCRIPT
// fallbacks of the runner.
func EvalCalls(t testing.TB, srv *redistest.Server) int {
	t.Helper()
	stats, err := srv.Do("INFO", "commandstats")
	require.NoError(t, err)
	for _, line := range strings.Split(stats, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_eval:calls="); ok {
			n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			require.NoError(t, err)
			return n
		}
	}
	return 0
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
