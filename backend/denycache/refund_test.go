package denycache_test

import (
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

// TestUnconfirmedRefundReachesOtherProcesses: process A waits for a
// replica (WithReplicaAck, DenyUnconfirmed) whose replication is stalled,
// so its admission of the key's last unit is given back after the wait.
// Meanwhile process B was denied the key and cached the denial. A's refund
// must reach B's cache: B is admitted again soon after, not when its cached
// RetryAfter (an hour) passes.
func TestUnconfirmedRefundReachesOtherProcesses(t *testing.T) {
	const ackWait = 2 * time.Second // room for B's denial while A waits
	ackStores := map[string]func(t *testing.T, addr string) process{
		"goredis": func(t *testing.T, addr string) process {
			c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 2 * ackWait})
			t.Cleanup(func() { _ = c.Close() })
			s, err := goredisstore.New(c, goredisstore.WithReplicaAck(1, ackWait, backend.DenyUnconfirmed))
			require.NoError(t, err)
			return newProcess(t, "go-redis", s, goredisstore.NewBus(c))
		},
		"rueidis": func(t *testing.T, addr string) process {
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
			require.NoError(t, err)
			t.Cleanup(c.Close)
			s, err := rueidisstore.New(c, rueidisstore.WithReplicaAck(1, ackWait, backend.DenyUnconfirmed))
			require.NoError(t, err)
			return newProcess(t, "rueidis", s, rueidisstore.NewBus(c))
		},
	}
	for name, mkA := range ackStores {
		t.Run(name, func(t *testing.T) {
			master := redistest.Start(t)
			replica := redistest.StartReplica(t, master)
			a, b := mkA(t, master.Addr()), rueidisProcess(t, master.Addr())
			rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 1, Window: time.Hour}
			key := backend.Key{Prefix: "ackrefund:", ID: "k"}
			req := func() backend.Request { return backend.Request{Key: key, Rule: rule, Now: time.Now(), Cost: 1} }

			// Load the script first: after a NOSCRIPT the pipelined WAIT
			// still runs, and waits for the connection's earlier writes.
			warm, err := a.store.Take(t.Context(), backend.Request{Key: backend.Key{Prefix: "warm:", ID: "k"}, Rule: rule, Now: time.Now(), Cost: 1})
			require.NoError(t, err)
			require.True(t, warm.Allowed && !warm.Unconfirmed, "the replica acknowledges while it runs")
			replica.Pause() // the replica acknowledges nothing
			t.Cleanup(replica.Resume)
			type outcome struct {
				res backend.Result
				err error
			}
			done := make(chan outcome, 1)
			go func() {
				res, err := a.cache.Take(t.Context(), req())
				done <- outcome{res, err}
			}()
			// Once A's script took the unit, B is denied, and caches it.
			taken := false
			for deadline := time.Now().Add(ackWait / 2); time.Now().Before(deadline) && !taken; time.Sleep(time.Millisecond) {
				d, err := b.store.Peek(t.Context(), req())
				taken = err == nil && !d.Allowed
			}
			require.True(t, taken, "A's script did not take the unit in time")
			d, err := b.cache.Take(t.Context(), req())
			require.NoError(t, err)
			require.False(t, d.Allowed)
			d, err = b.cache.Take(t.Context(), req())
			require.NoError(t, err)
			require.True(t, d.Cached, "B caches the denial while A waits")

			got := <-done
			require.NoError(t, got.err)
			require.False(t, got.res.Allowed, "A's admission was not acknowledged: denied")
			require.True(t, got.res.Unconfirmed)

			admitted := false
			var last backend.Result
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				last, err = b.cache.Take(t.Context(), req())
				require.NoError(t, err)
				if last.Allowed {
					admitted = true
					break
				}
			}
			require.True(t, admitted, "B kept its cached denial after A gave the unit back: %+v, %+v", last, b.cache.Stats())
		})
	}
}

// TestGiveBackEndsCachedDenials: Envoy's negative hits give units back
// (backend.UnitRefunder). Given back through A's deny cache, B's cached
// denial ends and B is admitted again; the control gives them back through
// A's store underneath, which no cache hears of: B keeps answering its
// cached denial, though Redis would admit.
func TestGiveBackEndsCachedDenials(t *testing.T) {
	srv := redistest.Start(t)
	rule := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 2, Window: time.Hour}
	for _, through := range []string{"cache", "store (control)"} {
		t.Run(through, func(t *testing.T) {
			a, b := goredisProcess(t, srv.Addr()), rueidisProcess(t, srv.Addr())
			key := backend.Key{Prefix: "giveback:" + through + ":", ID: "k"}
			req := func() backend.Request { return backend.Request{Key: key, Rule: rule, Now: time.Now(), Cost: 1} }
			for range 2 {
				d, err := a.cache.Take(t.Context(), req())
				require.NoError(t, err)
				require.True(t, d.Allowed)
			}
			for range 2 {
				_, err := b.cache.Take(t.Context(), req())
				require.NoError(t, err)
			}
			d, err := b.cache.Take(t.Context(), req())
			require.NoError(t, err)
			require.True(t, d.Cached && !d.Allowed, "B caches the denial: %+v", d)

			giver := backend.UnitRefunder(a.cache)
			if through != "cache" {
				var ok bool
				giver, ok = a.store.(backend.UnitRefunder)
				require.True(t, ok)
			}
			_, err = giver.GiveBack(t.Context(), req())
			require.NoError(t, err)
			peek, err := b.store.Peek(t.Context(), req())
			require.NoError(t, err)
			require.True(t, peek.Allowed, "Redis admits after the unit came back")

			admitted := false
			for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline) && !admitted; time.Sleep(10 * time.Millisecond) {
				d, err = b.cache.Peek(t.Context(), req())
				require.NoError(t, err)
				d, err = b.cache.Take(t.Context(), req())
				require.NoError(t, err)
				admitted = d.Allowed
			}
			if through == "cache" {
				require.True(t, admitted, "B kept its cached denial after A gave a unit back: %+v", d)
			} else {
				require.False(t, admitted, "the control: B's cache heard of a refund no cache announced")
				require.True(t, d.Cached)
			}
		})
	}
}
