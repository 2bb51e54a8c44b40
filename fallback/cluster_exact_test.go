package fallback_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/fallback"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// TestClusterExactKeysFollowTheKeyWritten: on a 3-master cluster with one
// master killed and its breaker open, requests with exact keys
// (backend.ExactKey, limitkit-rls's fixed windows) whose Key.ID hashes to
// the dead master but whose written key lives on a healthy one are decided
// by Redis, not degraded: their breaker is the written key's node's. The
// control routes them by Key.ID, as before: every one is degraded.
func TestClusterExactKeysFollowTheKeyWritten(t *testing.T) {
	for _, cl := range itClients { // not parallel: the control sets a package variable
		t.Run(cl.name, func(t *testing.T) { exactKeysFollow(t, cl) })
	}
}

// exactKeysFollow is the test for one client.
func exactKeysFollow(t *testing.T, cl itClient) {
	c := redistest.StartCluster(t, 3, 0, redistest.WithArgs("--cluster-require-full-coverage", "no"))
	conn := nodeClients[cl.name](t, c)
	fb, err := fallback.New(conn.store, fallback.WithPolicy(backend.FailClosed), fallback.WithTimeout(time.Second),
		fallback.WithFailureThreshold(1), fallback.WithOpenTimeout(time.Minute))
	require.NoError(t, err)
	rule := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 1 << 30, Window: time.Hour}
	victim := c.Masters[1]
	owner := func(key string) *redistest.Server { return c.MasterOf(redistest.KeySlot(key)) }
	now := time.Now()
	prefix := "exact:" + strconv.FormatInt(now.UnixNano(), 10) + ":"
	const n = 20
	var onVictim []backend.Request // plain keys on the dead master
	var exact []backend.Request    // Key.ID on the dead master, written key elsewhere
	for i := 0; len(exact) < n || len(onVictim) < n; i++ {
		req := backend.Request{Key: backend.Key{Prefix: prefix, ID: "id" + strconv.Itoa(i)}, Rule: rule, Now: now, Cost: 1}
		if owner(rediswire.Build("", req.Key.ID, "")) != victim {
			continue
		}
		if len(onVictim) < n {
			onVictim = append(onVictim, req)
		}
		req.Exact = backend.ExactKey{Base: prefix + "rls_" + strconv.Itoa(i) + "_"}
		if o := owner(rediswire.StateKey(&req)); o != victim && len(exact) < n {
			exact = append(exact, req)
		}
	}
	// Warm up: every key answered by Redis.
	for _, req := range append(append([]backend.Request{}, onVictim...), exact...) {
		res, err := fb.Take(t.Context(), req)
		require.NoError(t, err)
		require.False(t, res.Degraded)
	}
	// rueidisstore names a key's node from its own copy of the slot map,
	// loaded in the background: until then a failure is the whole
	// store's. Wait, bounded, until the dead master-to-be has a breaker.
	waitUntilFor(t, itWait, "a breaker for the victim's node (the store's slot map loaded)", func() bool {
		_, err := fb.Take(t.Context(), onVictim[0])
		require.NoError(t, err)
		return nodeStats(fb.Stats(), victim.Addr()) != nil
	})
	victim.Kill()
	for i := 0; i < 100 && fb.State() != backend.BreakerOpen; i++ {
		_, err := fb.Take(t.Context(), onVictim[i%n])
		require.NoError(t, err)
	}
	require.Equal(t, backend.BreakerOpen, fb.State(), "the dead master's breaker did not open")
	degraded := func() int {
		d := 0
		for _, req := range exact {
			res, err := fb.Take(t.Context(), req)
			require.NoError(t, err)
			if res.Degraded {
				d++
			}
		}
		return d
	}
	d := degraded()
	t.Logf("FIGURE %s: %d of %d decisions on exact keys of healthy masters degraded with one master dead", cl.name, d, n)
	require.Zero(t, d, "exact keys on healthy masters were degraded")

	defer fallback.SetSkipRequestLocator(true)()
	d = degraded()
	t.Logf("FIGURE %s, control (breaker of Key.ID's node): %d of %d degraded", cl.name, d, n)
	require.Equal(t, n, d, "the control routed the exact keys to healthy breakers: the test cannot tell")
}
