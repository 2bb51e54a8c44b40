package wrappertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/denycache"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/observe"
	"github.com/limitkit/limitkit/backend/rueidisstore"
	"github.com/limitkit/limitkit/backend/storetest"
	"github.com/limitkit/limitkit/fallback"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/limiter/storestack"
)

// topology is a store under test and the bus its deny cache listens on.
type topology struct {
	name    string
	store   backend.Store
	bus     denycache.Bus
	cluster bool
}

func topologies(t *testing.T) []topology {
	mem, err := memorystore.New()
	require.NoError(t, err)
	out := []topology{{name: "memory", store: mem}}
	redistest.Require(t)
	srv := redistest.Start(t)
	cluster := redistest.StartCluster(t, 3, 0)
	sn := redistest.StartSentinel(t)
	goredis := map[string]redis.UniversalClient{
		"goredis":          redis.NewClient(&redis.Options{Addr: srv.Addr()}),
		"goredis-cluster":  redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()}),
		"goredis-sentinel": redis.NewFailoverClient(&redis.FailoverOptions{MasterName: sn.MasterName, SentinelAddrs: sn.SentinelAddrs()}),
	}
	rueidisOpts := map[string]rueidis.ClientOption{
		"rueidis":          {InitAddress: []string{srv.Addr()}, ForceSingleClient: true},
		"rueidis-cluster":  {InitAddress: cluster.Addrs()},
		"rueidis-sentinel": {InitAddress: sn.SentinelAddrs(), Sentinel: rueidis.SentinelOption{MasterSet: sn.MasterName}},
	}
	for _, name := range []string{"goredis", "goredis-cluster", "goredis-sentinel"} {
		c := goredis[name]
		t.Cleanup(func() { _ = c.Close() })
		s, err := goredisstore.New(c)
		require.NoError(t, err, name)
		out = append(out, topology{name: name, store: s, bus: goredisstore.NewBus(c), cluster: name == "goredis-cluster"})
	}
	for _, name := range []string{"rueidis", "rueidis-cluster", "rueidis-sentinel"} {
		c, err := rueidis.NewClient(rueidisOpts[name])
		require.NoError(t, err, name)
		t.Cleanup(c.Close)
		s, err := rueidisstore.New(c)
		require.NoError(t, err, name)
		out = append(out, topology{name: name, store: s, bus: rueidisstore.NewBus(c), cluster: name == "rueidis-cluster"})
	}
	return out
}

// stack is one documented stack over a topology's store.
type stack struct {
	name  string
	store backend.Store
	// guard is the stack's fallback store, when it has one.
	guard *fallback.Store
}

// stacks are the documented stacks (docs/stores.md, "Stacking wrappers"),
// as storestack.New builds them for limiter/config and limitkit-rls: the
// deny cache inside fallback, the observer outermost.
func stacks(t *testing.T, top topology) []stack {
	ready := func(d *denycache.Store) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		require.NoError(t, d.Ready(ctx))
	}
	build := func(name string, opts ...storestack.Option) stack {
		st, err := storestack.New(top.store, opts...)
		require.NoError(t, err, name)
		t.Cleanup(func() { _ = st.Close() })
		if st.DenyCache != nil {
			ready(st.DenyCache)
		}
		return stack{name: name, store: st.Store, guard: st.Fallback}
	}
	cache := storestack.WithDenyCache(top.bus)
	// A long deadline: a degraded answer would fail the conformance
	// suite, and it must not come from a loaded machine.
	guard := storestack.WithFallback(fallback.WithTimeout(10 * time.Second))
	observed := storestack.WithObserver(observe.Observer{OnDecision: func(context.Context, observe.Decision) {}})
	return []stack{
		build("denycache", cache),
		build("fallback", guard),
		build("fallback(denycache)", cache, guard),
		// The options in another order: the stack's order is New's.
		build("observe(fallback(denycache))", observed, guard, cache),
	}
}

// capabilities names each optional capability and reports whether s has
// it, found through its wrappers.
func capabilities(s backend.Store) map[string]bool {
	_, lease := backend.As[backend.LeaseStore](s)
	_, node := backend.As[backend.NodeLocator](s)
	_, ctxh := backend.As[backend.ContextHonourer](s)
	_, refunds := backend.As[backend.RefundCounter](s)
	_, evictions := backend.As[backend.EvictionCounter](s)
	_, ack := backend.As[backend.AckWaiter](s)
	_, giveBack := backend.As[backend.UnitRefunder](s)
	return map[string]bool{
		"LeaseStore": lease, "NodeLocator": node, "ContextHonourer": ctxh, "RefundCounter": refunds,
		"EvictionCounter": evictions, "AckWaiter": ack, "UnitRefunder": giveBack,
	}
}

// TestStacksKeepCapabilities: every documented stack over every store and
// topology (memory; one server, a 3-master cluster and Sentinel with both
// clients) keeps each capability of the store underneath, passes the
// store conformance suite, holds and releases leases, and over a cluster
// keeps one breaker per node through the deny cache and the observer.
func TestStacksKeepCapabilities(t *testing.T) {
	for _, top := range topologies(t) {
		t.Run(top.name, func(t *testing.T) {
			want := capabilities(top.store)
			require.True(t, want["LeaseStore"], "every store holds leases")
			for _, st := range stacks(t, top) {
				t.Run(st.name, func(t *testing.T) {
					got := capabilities(st.store)
					for name, has := range want {
						if has {
							require.True(t, got[name], "%s lost %s", st.name, name)
						}
					}
					_, each := st.store.(backend.EachTaker)
					require.True(t, each, "%s is no backend.EachTaker: a TakeAll's each would be lost", st.name)
					leases(t, st.store)
					if top.cluster && st.guard != nil {
						nodeBreakers(t, st)
					}
				})
			}
			// The conformance suite through the whole stack (the others
			// are parts of it).
			all := stacks(t, top)
			storetest.Run(t, all[len(all)-1].store)
		})
	}
}

// leases acquires two units of a concurrency limit of 2 through s, sees a
// third refused, and releases and renews them.
func leases(t *testing.T, s backend.Store) {
	ls, ok := backend.As[backend.LeaseStore](s)
	require.True(t, ok)
	rule := algorithms.Rule{Algorithm: algorithms.Concurrency, Limit: 2, Window: time.Minute}
	req := backend.Request{Key: backend.Key{Prefix: fmt.Sprintf("wrap:%d:", time.Now().UnixNano()), ID: "u"}, Rule: rule, Now: time.Now(), Cost: 1}
	var held []int64
	for range 2 {
		res, err := s.Take(t.Context(), req)
		require.NoError(t, err)
		require.True(t, res.Allowed)
		require.NotZero(t, res.Lease)
		held = append(held, res.Lease)
	}
	res, err := s.Take(t.Context(), req)
	require.NoError(t, err)
	require.False(t, res.Allowed, "a third lease at limit 2")
	renewed, err := ls.Renew(t.Context(), req, held[0])
	require.NoError(t, err)
	require.True(t, renewed.Allowed)
	for _, id := range []int64{renewed.Lease, held[1]} {
		ok, err := ls.Release(t.Context(), req, id)
		require.NoError(t, err)
		require.True(t, ok, "lease %d was held", id)
	}
	res, err = s.Take(t.Context(), req)
	require.NoError(t, err)
	require.True(t, res.Allowed, "released leases free their slots")
}

// nodeBreakers decides keys spread over the cluster's masters through the
// stack and checks that its fallback store keeps a breaker per node.
func nodeBreakers(t *testing.T, st stack) {
	rule := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 1000, Window: time.Minute}
	prefix := fmt.Sprintf("wrapnode:%d:", time.Now().UnixNano())
	for i := range 64 {
		_, err := st.store.Take(t.Context(), backend.Request{Key: backend.Key{Prefix: prefix, ID: fmt.Sprint(i)}, Rule: rule, Now: time.Now(), Cost: 1})
		require.NoError(t, err)
	}
	nodes := map[string]bool{}
	for _, n := range st.guard.Stats().Nodes {
		if n.Node != "" {
			nodes[n.Node] = true
		}
	}
	require.Len(t, nodes, 3, "one breaker per master through %s: %+v", st.name, st.guard.Stats().Nodes)
}

// opaque is a wrapper without Unwrap: the control.
type opaque struct{ backend.Store }

// TestControlAnOpaqueWrapperLosesCapabilities: the check above can fail. A
// wrapper that does not implement Unwrap hides the memory store's leases
// and eviction counts, and capabilities says so.
func TestControlAnOpaqueWrapperLosesCapabilities(t *testing.T) {
	mem, err := memorystore.New()
	require.NoError(t, err)
	want, got := capabilities(mem), capabilities(opaque{mem})
	require.True(t, want["LeaseStore"] && want["EvictionCounter"])
	require.False(t, got["LeaseStore"] || got["EvictionCounter"], "an opaque wrapper kept capabilities: %v", got)
}
