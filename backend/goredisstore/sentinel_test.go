package goredisstore_test

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
	"github.com/limitkit/limitkit/internal/rediswire"
)

// TestWrongMasterNameSaysSo: a failover client whose master name the real
// sentinels do not monitor fails every call with an error that says so,
// not as a malformed script reply (go-redis reports the sentinels' nil
// answer as redis.Nil, which the store used to read as the script's reply).
func TestWrongMasterNameSaysSo(t *testing.T) {
	sn := redistest.StartSentinel(t)
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: sn.MasterName + "-typo",
		SentinelAddrs: sn.SentinelAddrs(), DialTimeout: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	for _, batch := range []int{1, goredisstore.DefaultBatch} {
		s, err := goredisstore.New(c, goredisstore.WithBatching(batch))
		require.NoError(t, err)
		rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 5, Window: time.Minute}
		req := backend.Request{Key: backend.Key{Prefix: "s:", ID: "u"}, Rule: rule, Now: time.Now(), Cost: 1}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, takeErr := s.Take(ctx, req)
		_, peekErr := s.Peek(ctx, req)
		resetErr := s.Reset(ctx, req.Key, rule, time.Now())
		for _, err := range []error{takeErr, peekErr, resetErr} {
			require.Error(t, err)
			require.NotErrorIs(t, err, rediswire.ErrBadReply)
			require.ErrorContains(t, err, "no master by that name")
			require.ErrorContains(t, err, "master_name")
		}
		t.Logf("batch %d: %v", batch, takeErr)
	}
}
