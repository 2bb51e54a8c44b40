package redisengine_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/backend/internal/redisengine"
	"github.com/limitkit/limitkit/backend/rueidisstore"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// TestClusterNativeTakeAllFailedNodeLeavesNothing: a native TakeAll (fixed
// windows) whose two keys live on two masters of a 3-master cluster, one of
// them paused (SIGSTOP) or killed. Every call fails; none admits, so the
// healthy master's key must end at 0: the increments it counted are given
// back. Before, they stayed (one per call). The control keeps them and
// must see the leak.
func TestClusterNativeTakeAllFailedNodeLeavesNothing(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0, redistest.WithArgs("--cluster-require-full-coverage", "no"))
	rule := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 1000, Window: time.Hour}
	healthy, victim := c.Masters[0], c.Masters[1]
	clients := map[string]func(t *testing.T) backend.Store{
		"goredis": func(t *testing.T) backend.Store {
			cl := redis.NewClusterClient(&redis.ClusterOptions{
				Addrs: c.Addrs(), PoolSize: 8, DialTimeout: 100 * time.Millisecond,
				ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond,
				ContextTimeoutEnabled: true, MaxRetries: -1,
			})
			t.Cleanup(func() { _ = cl.Close() })
			s, err := goredisstore.New(cl)
			require.NoError(t, err)
			return s
		},
		"rueidis": func(t *testing.T) backend.Store {
			cl, err := rueidis.NewClient(rueidis.ClientOption{
				InitAddress: c.Addrs(), DisableCache: true,
				ConnWriteTimeout: 200 * time.Millisecond, Dialer: net.Dialer{Timeout: 100 * time.Millisecond},
			})
			require.NoError(t, err)
			t.Cleanup(cl.Close)
			s, err := rueidisstore.New(cl)
			require.NoError(t, err)
			return s
		},
	}
	direct := redis.NewClient(&redis.Options{Addr: healthy.Addr()})
	t.Cleanup(func() { _ = direct.Close() })
	run := 0
	// reqs returns a request on healthy's slots then one on victim's.
	reqs := func(now time.Time) []backend.Request {
		run++
		prefix := fmt.Sprintf("leak:%d:%d:", run, time.Now().UnixNano())
		var out [2]*backend.Request
		for i := 0; out[0] == nil || out[1] == nil; i++ {
			req := backend.Request{Key: backend.Key{Prefix: prefix, ID: "k" + strconv.Itoa(i)}, Rule: rule, Now: now, Cost: 1}
			key, _, _ := rediswire.NativeKey(&req)
			switch c.MasterOf(redistest.KeySlot(key)) {
			case healthy:
				if out[0] == nil {
					out[0] = &req
				}
			case victim:
				if out[1] == nil {
					out[1] = &req
				}
			}
		}
		return []backend.Request{*out[0], *out[1]}
	}
	const calls = 20
	// leaked runs calls TakeAlls at once (each waits out its deadline on a
	// paused master) with victim failed by fail, and returns what the
	// healthy master's key holds once done says so or after 5 s: the test
	// waits for its refunds to land (nothing left), the control for the
	// increments it keeps (some left).
	leaked := func(t *testing.T, store backend.Store, fail func(), done func(left int64) bool) int64 {
		rs := reqs(time.Now())
		// Warm the client's slot map and connections.
		res, err := store.TakeAll(t.Context(), rs)
		require.NoError(t, err)
		require.True(t, res.Allowed)
		fail()
		var wg sync.WaitGroup
		var admitted atomic.Int64
		for range calls {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
				defer cancel()
				if res, err := store.TakeAll(ctx, rs); err == nil && res.Allowed {
					admitted.Add(1)
				}
			})
		}
		wg.Wait()
		require.Zero(t, admitted.Load(), "a TakeAll admitted with a master down")
		key, _, _ := rediswire.NativeKey(&rs[0])
		var n int64
		deadline := time.Now().Add(5 * time.Second)
		for {
			n, err = direct.Get(t.Context(), key).Int64()
			require.NoError(t, err)
			if done(n-1) || time.Now().After(deadline) {
				return n - 1 // the warm-up admitted one
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, how := range []string{"paused", "killed"} {
		for name, newStore := range clients {
			t.Run(how+"/"+name, func(t *testing.T) {
				fail, heal := victim.Pause, victim.Resume
				if how == "killed" {
					fail, heal = victim.Kill, func() { victim.Restart(); c.WaitOK() }
				}
				store := newStore(t)
				n := leaked(t, store, fail, func(left int64) bool { return left <= 0 })
				heal()
				t.Logf("FIGURE %s, %s master: %d units left on the healthy master after %d failed TakeAlls", name, how, n, calls)
				require.Zero(t, n, "the healthy master kept increments of failed calls")

				restore := redisengine.SetSkipPartialRefunds(true)
				defer restore()
				n = leaked(t, newStore(t), fail, func(left int64) bool { return left > 0 })
				heal()
				t.Logf("FIGURE %s, %s master, control (no partial refunds): %d units left", name, how, n)
				require.Positive(t, n, "the control left nothing: the test cannot tell")
			})
		}
	}
}
