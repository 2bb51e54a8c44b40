package redisengine_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/backend/rueidisstore"
	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// TestUnconfirmedWhenTheDeadlineCutsWAIT (issue 22, defect 14): with
// clients that honour the caller's deadline, an ack timeout longer than the
// time left (a minute against a second, for a replica that does not exist)
// let the deadline cut WAIT, and both clients failed the script's reply
// with it: an error, and the admission's unit stayed taken with no one to
// refund it.
// The reply is now kept, so the admission is known to be unconfirmed: under
// DenyUnconfirmed denied with its unit given back, under AdmitUnconfirmed
// admitted and marked so. (Cutting WAIT's timeout to the deadline would not
// do: Redis ends a WAIT on its timer, up to 1000/hz ms late.)
func TestUnconfirmedWhenTheDeadlineCutsWAIT(t *testing.T) {
	srv := redistest.Start(t)
	rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 3, Window: time.Hour}
	// Load the scripts first with a store that waits 10 ms, so that each
	// Take below is one EVALSHA and WAIT (after NOSCRIPT the EVAL and its
	// WAIT would start from what the first WAIT left of the deadline).
	{
		c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		warm, err := goredisstore.New(c, goredisstore.WithReplicaAck(1, 10*time.Millisecond, backend.AdmitUnconfirmed))
		require.NoError(t, err)
		req := backend.Request{Key: backend.Key{Prefix: "ackdl:", ID: "warm"}, Rule: rule, Now: time.Now(), Cost: 1}
		_, err = warm.Take(t.Context(), req)
		require.NoError(t, err)
		_ = c.Close()
	}
	stores := map[string]func(backend.OnShortAck) backend.Store{
		"goredis": func(on backend.OnShortAck) backend.Store {
			c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = c.Close() })
			s, err := goredisstore.New(c, goredisstore.WithReplicaAck(1, time.Minute, on))
			require.NoError(t, err)
			return s
		},
		"rueidis": func(on backend.OnShortAck) backend.Store {
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, ForceSingleClient: true})
			require.NoError(t, err)
			t.Cleanup(c.Close)
			s, err := rueidisstore.New(c, rueidisstore.WithReplicaAck(1, time.Minute, on))
			require.NoError(t, err)
			return s
		},
	}
	for name, open := range stores {
		for on, policy := range map[backend.OnShortAck]string{backend.DenyUnconfirmed: "deny", backend.AdmitUnconfirmed: "admit"} {
			t.Run(name+"/"+policy, func(t *testing.T) {
				s := open(on)
				req := backend.Request{Key: backend.Key{Prefix: "ackdl:" + name + policy + ":", ID: "u"}, Rule: rule, Now: time.Now(), Cost: 1}
				ctx, cancel := context.WithTimeout(t.Context(), time.Second)
				defer cancel()
				res, err := s.Take(ctx, req)
				// WAIT's own timeout is a minute: whatever came back in time
				// came back because the deadline cut WAIT. (Not ctx.Err():
				// the socket's deadline can fire a moment before ctx's.)
				require.NoError(t, err, "the deadline cut WAIT, and the admission's reply with it")
				peek, err := s.Peek(t.Context(), req)
				require.NoError(t, err)
				if on == backend.DenyUnconfirmed {
					require.False(t, res.Allowed, "an unconfirmed admission was admitted")
					require.Equal(t, rule.Limit, peek.Remaining, "the unconfirmed admission's unit stayed taken")
				} else {
					require.True(t, res.Allowed && res.Unconfirmed, "want an admission marked unconfirmed, got %+v", res)
					require.Equal(t, rule.Limit-1, peek.Remaining)
				}
			})
		}
	}
}
