package fallback_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/fallback"
	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// TestReadOnlyIsAFailover: the master a store talks to becomes a replica
// (REPLICAOF, as a failover that promoted another node leaves it, or
// MemoryDB's and ElastiCache's own failovers) and answers READONLY to
// every write. Through fallback no caller sees an error: the answers
// count toward the breaker, which opens naming READONLY, and decisions
// follow the policy; once the node is a master again they come from it.
// The control asks the same node through the store alone, which returns
// the READONLY error: the test does meet the answer it is about.
func TestReadOnlyIsAFailover(t *testing.T) {
	for _, cl := range itClients {
		t.Run(cl.name, func(t *testing.T) {
			a, b := redistest.Start(t), redistest.Start(t)
			conn := cl.single(t, a.Addr())
			var mu sync.Mutex
			var causes []string
			fb, err := fallback.New(conn.store, fallback.WithTimeout(250*time.Millisecond), fallback.WithFailureThreshold(3),
				fallback.WithOpenTimeout(100*time.Millisecond), fallback.WithLogger(quietLogger()),
				fallback.WithStateHook(func(c backend.StateChange) {
					if c.To == backend.BreakerOpen && c.Cause != nil {
						mu.Lock()
						causes = append(causes, c.Cause.Error())
						mu.Unlock()
					}
				}))
			require.NoError(t, err)
			rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 10000, Window: time.Hour}
			req := func() backend.Request {
				return backend.Request{Key: backend.Key{Prefix: "readonly:", ID: cl.name}, Rule: rule, Now: time.Now(), Cost: 1}
			}
			ctx := context.Background()
			waitUntilFor(t, itWait, "a decision from the master", func() bool {
				res, err := fb.Take(ctx, req())
				require.NoError(t, err)
				return !res.Degraded
			})

			host, port, err := net.SplitHostPort(b.Addr())
			require.NoError(t, err)
			_, err = a.Do("REPLICAOF", host, port)
			require.NoError(t, err)
			waitUntilFor(t, itWait, "the node answers READONLY", func() bool {
				_, err := conn.store.Take(ctx, req())
				return err != nil && strings.Contains(err.Error(), "READONLY")
			})
			waitUntilFor(t, itWait, "the breaker opens on READONLY", func() bool {
				res, err := fb.Take(ctx, req())
				require.NoError(t, err, "a READONLY answer reached the caller")
				require.True(t, res.Degraded || fb.State() != backend.BreakerOpen)
				return fb.State() == backend.BreakerOpen
			})
			fb.State() // delivers the state changes
			mu.Lock()
			opened := strings.Join(causes, "; ")
			mu.Unlock()
			require.Contains(t, opened, "READONLY", "the opening does not name READONLY")

			_, err = a.Do("REPLICAOF", "NO", "ONE")
			require.NoError(t, err)
			waitUntilFor(t, itWait, "decisions from the node, a master again", func() bool {
				res, err := fb.Take(ctx, req())
				require.NoError(t, err)
				return !res.Degraded && fb.State() == backend.BreakerClosed
			})
		})
	}
}
