package fallback_test

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/backend/rueidisstore"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/internal/dev/scripttest"
)

// TestClusterBatchesPerNode: 64 callers, 3,200 Takes over 32 keys spread
// over the slots of a 3-master cluster (limit 40 a minute each): every key
// admits exactly its limit, and with batching on (the default) the masters
// ran fewer than half as many EVALSHA as there were decisions (INFO
// commandstats summed over the masters). The control sends each Take alone
// (WithBatching(1)): one EVALSHA per decision.
func TestClusterBatchesPerNode(t *testing.T) {
	t.Parallel() // a cluster of its own: its command counts are its own
	c := redistest.StartCluster(t, 3, 0)
	for _, client := range []string{"goredis", "rueidis"} {
		for _, batch := range []int{0, 1} {
			name := client + "/batched"
			if batch == 1 {
				name = client + "/control_unbatched"
			}
			t.Run(name, func(t *testing.T) {
				s := clusterStore(t, client, c, batch)
				calls, decisions := clusterTakesStayExact(t, s, c)
				ratio := float64(calls) / float64(decisions)
				t.Logf("FIGURE %s: %d EVALSHA for %d decisions on the cluster (%.3f per decision)", name, calls, decisions, ratio)
				if batch == 1 {
					require.GreaterOrEqual(t, ratio, 0.99, "the control should send one script per decision")
				} else {
					require.Less(t, ratio, 0.5, "batches did not form per node")
				}
			})
		}
	}
}

// clusterStore is a store of the named client on c; batch 0 keeps the
// default batching.
func clusterStore(t *testing.T, client string, c *redistest.Cluster, batch int) backend.Store {
	switch client {
	case "goredis":
		cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), PoolSize: 16})
		t.Cleanup(func() { _ = cl.Close() })
		var opts []goredisstore.Option
		if batch > 0 {
			opts = append(opts, goredisstore.WithBatching(batch))
		}
		s, err := goredisstore.New(cl, opts...)
		require.NoError(t, err)
		return s
	default:
		cl, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: c.Addrs(), DisableCache: true})
		require.NoError(t, err)
		t.Cleanup(cl.Close)
		var opts []rueidisstore.Option
		if batch > 0 {
			opts = append(opts, rueidisstore.WithBatching(batch))
		}
		s, err := rueidisstore.New(cl, opts...)
		require.NoError(t, err)
		return s
	}
}

// clusterTakesStayExact runs the load and checks every key admitted
// exactly its limit; it returns the EVALSHA calls the masters ran and the
// decisions made.
func clusterTakesStayExact(t *testing.T, s backend.Store, c *redistest.Cluster) (calls, decisions int) {
	t.Helper()
	const keys, limit, callers, perCaller = 32, 40, 64, 50
	rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: limit, Window: time.Minute}
	prefix := fmt.Sprintf("batchnode:%d:", time.Now().UnixNano())
	// Warm every master's script cache, so that the count is of EVALSHA.
	for i := range keys {
		_, err := s.Peek(t.Context(), backend.Request{Key: backend.Key{Prefix: prefix, ID: "k" + strconv.Itoa(i)}, Rule: rule, Now: time.Now(), Cost: 1})
		require.NoError(t, err)
	}
	before := 0
	for _, m := range c.Masters {
		before += scripttest.CommandCalls(t, m, "evalsha")
	}
	now := time.Now()
	var mu sync.Mutex
	admitted := map[string]int{}
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			for i := range perCaller {
				id := "k" + strconv.Itoa((g*7+i)%keys)
				res, err := s.Take(t.Context(), backend.Request{Key: backend.Key{Prefix: prefix, ID: id}, Rule: rule, Now: now, Cost: 1})
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
	for i := range keys {
		require.Equal(t, limit, admitted["k"+strconv.Itoa(i)], "key k%d", i)
	}
	for _, m := range c.Masters {
		calls += scripttest.CommandCalls(t, m, "evalsha")
	}
	return calls - before, callers * perCaller
}
