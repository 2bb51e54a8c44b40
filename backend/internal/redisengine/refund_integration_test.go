package redisengine_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// TestRollbackAfterTheCallersDeadline: on a real redis-server without
// replicas, an admission waiting for one replica's acknowledgement is never
// confirmed; WAIT blocks past the caller's deadline (go-redis without
// ContextTimeoutEnabled reads on), and the rollback must still give the
// unit back. Before refunds were detached from the caller's context, the
// rollback failed on the expired context and the unit stayed taken.
func TestRollbackAfterTheCallersDeadline(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	gs, err := goredisstore.New(c, goredisstore.WithReplicaAck(1, 300*time.Millisecond, backend.DenyUnconfirmed))
	require.NoError(t, err)
	rule := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 3, Window: time.Hour}
	req := backend.Request{Key: backend.Key{Prefix: "rb:", ID: "u"}, Rule: rule, Now: time.Now(), Cost: 1}

	// Load the script first, so that the Take below is one round trip
	// (EVALSHA and WAIT) with no EVAL after NOSCRIPT.
	warm := req
	warm.Key.ID = "warm"
	_, err = gs.Take(t.Context(), warm)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	res, err := gs.Take(ctx, req)
	require.NoError(t, err, "the rollback failed")
	require.False(t, res.Allowed, "an unconfirmed admission was not denied")
	require.Error(t, ctx.Err(), "the caller's deadline did not pass during WAIT")
	peek, err := gs.Peek(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, rule.Limit, peek.Remaining, "the unconfirmed admission's unit stayed taken")
	require.Zero(t, gs.FailedRefunds())

}
