package denycache_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/denycache"
	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// TestReconnectEmptiesTheCache: a cached denial does not outlive the
// subscription it was kept under. Redis restarts without persistence (the
// key is gone, so the store admits again) or kills the pub/sub connections;
// either way the bus's subscription broke and messages published meanwhile
// are lost, so the cache must empty at once, not when its next probe fails.
// The probe interval is an hour: only noticing the reconnect can flush it.
func TestReconnectEmptiesTheCache(t *testing.T) {
	faults := map[string]func(*redistest.Server){
		"restart":            func(s *redistest.Server) { s.Restart() },
		"client kill pubsub": func(s *redistest.Server) { _, _ = s.Do("CLIENT", "KILL", "TYPE", "pubsub") },
	}
	makers := map[string]func(*testing.T, string, ...denycache.Option) process{
		"goredis": goredisProcess, "rueidis": rueidisProcess,
	}
	for fault, do := range faults {
		for name, mk := range makers {
			t.Run(fault+"/"+name, func(t *testing.T) {
				srv := redistest.Start(t)
				p := mk(t, srv.Addr(), denycache.WithProbeInterval(time.Hour))
				rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 1, Window: time.Hour}
				key := backend.Key{Prefix: "reconnect:", ID: "k"}
				take := func() (backend.Result, error) {
					return p.cache.Take(t.Context(), backend.Request{Key: key, Rule: rule, Now: time.Now(), Cost: 1})
				}
				d, err := take()
				require.NoError(t, err)
				require.True(t, d.Allowed)
				d, err = take()
				require.NoError(t, err)
				require.False(t, d.Allowed)
				d, err = take()
				require.NoError(t, err)
				require.True(t, d.Cached, "the denial is cached")

				do(srv)
				flushed := false
				for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
					d, err := take()
					if err == nil && !d.Cached {
						flushed = true
						if fault == "restart" {
							require.True(t, d.Allowed, "the restarted Redis holds nothing for the key")
						}
						break
					}
				}
				require.True(t, flushed, "the cache still answered the key's denial after its subscription broke: %+v", p.cache.Stats())
			})
		}
	}
}
