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
	"github.com/limitkit/limitkit/backend/internal/redisengine"
	"github.com/limitkit/limitkit/backend/rueidisstore"
	"github.com/limitkit/limitkit/backend/storetest"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// nativeStores returns both stores on srv, with opts.
func nativeStores(t *testing.T, srv *redistest.Server, server bool) map[string]backend.Store {
	t.Helper()
	gc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = gc.Close() })
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(rc.Close)
	var gopts []goredisstore.Option
	var ropts []rueidisstore.Option
	if server {
		gopts, ropts = append(gopts, goredisstore.WithServerTime()), append(ropts, rueidisstore.WithServerTime())
	}
	gs, err := goredisstore.New(gc, gopts...)
	require.NoError(t, err)
	rs, err := rueidisstore.New(rc, ropts...)
	require.NoError(t, err)
	return map[string]backend.Store{"goredis": gs, "rueidis": rs}
}

// Fixed windows go on native commands: a Take of one unit and a TakeAll of
// fixed windows send INCRBY and PEXPIRE, and no script; a refused TakeAll
// gives its increments back (one script: rediswire.RefundWindowScript) and leaves the counts as
// they were. A Take of more units and a TakeAll mixing algorithms go by
// script, as everything does under server time.
func TestFixedWindowsPaths(t *testing.T) {
	srv := redistest.Start(t)
	fw := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 2, Window: time.Hour}
	gcra := algorithms.Rule{Algorithm: algorithms.GCRA, Limit: 2, Window: time.Hour}
	now := time.Now()
	req := func(prefix, id string, rule algorithms.Rule, cost int64) backend.Request {
		return backend.Request{Key: backend.Key{Prefix: prefix, ID: id}, Rule: rule, Now: now, Cost: cost}
	}
	scripts := func() int { c := commandCalls(t, srv); return c["evalsha"] + c["eval"] }
	reset := func() {
		_, err := srv.Do("CONFIG", "RESETSTAT")
		require.NoError(t, err)
	}
	for name, s := range nativeStores(t, srv, false) {
		p := "paths:" + name + ":"
		reset()
		res, err := s.Take(t.Context(), req(p, "a", fw, 1))
		require.NoError(t, err)
		require.True(t, res.Allowed)
		res, err = s.TakeAll(t.Context(), []backend.Request{req(p, "a", fw, 1), req(p+"b:", "a", fw, 1)})
		require.NoError(t, err)
		require.True(t, res.Allowed)
		require.Zero(t, scripts(), "%s: no script for fixed windows", name)
		// a is full: refused, and both increments given back by one
		// script (EVALSHA, and EVAL after NOSCRIPT the first time), which
		// finds them in the epoch they counted in.
		res, err = s.TakeAll(t.Context(), []backend.Request{req(p+"b:", "a", fw, 1), req(p, "a", fw, 1)})
		require.NoError(t, err)
		require.False(t, res.Allowed)
		c := commandCalls(t, srv)
		require.Equal(t, 1, c["evalsha"], "%s: the refund is one script", name)
		require.Equal(t, 5, c["incrby"], name)
		require.Equal(t, 5, c["pexpire"], name)
		require.Equal(t, 2, c["decrby"], name) // both of the refused call's increments
		key, _, _ := rediswire.NativeKey(&backend.Request{Key: backend.Key{Prefix: p + "b:", ID: "a"}, Rule: fw, Now: now})
		v, err := srv.Do("GET", key)
		require.NoError(t, err)
		require.Equal(t, "1", v, "%s: the refused TakeAll's increment on b is given back", name)

		// Twice: the second time the scripts are loaded (no NOSCRIPT).
		for _, id := range []string{"c", "d"} {
			reset()
			_, err = s.Take(t.Context(), req(p+id, "x", fw, 2))
			require.NoError(t, err)
			_, err = s.TakeAll(t.Context(), []backend.Request{req(p+id, "y", fw, 1), req(p+id, "y", gcra, 1)})
			require.NoError(t, err)
		}
		require.Equal(t, 2, scripts(), "%s: a Take of 2 units and a mixed TakeAll go by script", name)
	}
	for name, s := range nativeStores(t, srv, true) {
		for _, id := range []string{"a", "b"} {
			reset()
			_, err := s.Take(t.Context(), req("paths:server:"+name+":", id, fw, 1))
			require.NoError(t, err)
		}
		require.Equal(t, 1, scripts(), "%s: server time goes by script", name)
	}
}

// The conformance suite sees a store that forgets its native refunds (a
// refused TakeAll leaves its other limits' units taken): the control for
// the suite's take_all cases on the native path.
func TestConformanceCatchesMissingNativeRefund(t *testing.T) {
	srv := redistest.Start(t)
	for name, s := range nativeStores(t, srv, false) {
		restore := redisengine.SetSkipNativeRefunds(true)
		failures := storetest.Check(context.Background(), s)
		restore()
		require.NotEmpty(t, failures, "%s: a store without refunds passed the conformance suite", name)
		t.Logf("%s: caught in %d checks, first %s: %.200s", name, len(failures), failures[0].Case, failures[0].Message)
	}
}
