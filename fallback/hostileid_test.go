package fallback_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/rueidisstore"
	"github.com/limitkit/limitkit/backend/storetest"
	"github.com/limitkit/limitkit/fallback"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/limiter"
)

// maxErrLen is the longest error the library may return, whatever the input.
const maxErrLen = 1024

// TestHostileIDsDoNotReachErrors calls every public entry point that takes
// an id with a 1 MiB id, over stores that fail (a memory store that denies,
// a fallback over a dead primary, both Redis stores with their server
// killed), and requires every call to fail with an error under 1 KiB.
// Before ids were bounded, Wait and a fallback's Reset copied the whole id.
func TestHostileIDsDoNotReachErrors(t *testing.T) {
	t.Parallel() // mostly dials to a killed server; no package variable
	huge := strings.Repeat("{\"\x00é", 1<<20/5)
	cfg := limiter.Config{Limit: 1, Window: time.Hour, Prefix: "h:"}
	guarded := cfg
	guarded.Guard = &limiter.Guard{Limit: 10, Window: 24 * time.Hour}
	composite := []limiter.Config{{Limit: 1, Window: time.Hour, Prefix: "c1:"}, {Limit: 1, Window: time.Hour, Prefix: "c2:"}}

	srv := redistest.Start(t)
	gc := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = gc.Close() })
	gs, err := goredisstore.New(gc)
	require.NoError(t, err)
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true, DisableRetry: true,
		Dialer: net100ms()})
	require.NoError(t, err)
	t.Cleanup(rc.Close)
	rs, err := rueidisstore.New(rc)
	require.NoError(t, err)
	srv.Kill()

	mem, err := memorystore.New()
	require.NoError(t, err)
	down := storetest.Down{Err: errors.New("connection refused")}
	stores := map[string]backend.Store{
		"memory":            mem,
		"fallback":          newStore(t, down),
		"fallback-goredis":  newStore(t, gs),
		"fallback-rueidis":  newStore(t, rs),
		"goredis (killed)":  gs,
		"rueidis (killed)":  rs,
		"fallback (closed)": newStore(t, down, fallback.WithPolicy(backend.FailClosed)),
	}
	calls := 0
	for name, store := range stores {
		check := func(what string, err error) {
			t.Helper()
			calls++
			if err == nil {
				return // a decision, not an error: nothing to bound
			}
			if len(err.Error()) > maxErrLen {
				t.Errorf("%s: %s: a %d-byte error: %.200s", name, what, len(err.Error()), err)
			}
		}
		lim, err := limiter.New(store, cfg)
		require.NoError(t, err)
		glim, err := limiter.New(store, guarded)
		require.NoError(t, err)
		comp, err := limiter.NewComposite(store, composite)
		require.NoError(t, err)
		ctx, cancelAll := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancelAll()
		for _, l := range []*limiter.Limiter{lim, glim} {
			_, err = l.Allow(ctx, huge)
			check("Allow", err)
			_, err = l.AllowN(ctx, huge, 1)
			check("AllowN", err)
			_, err = l.AllowN(ctx, huge, 2)
			check("AllowN over the limit", err)
			_, err = l.Peek(ctx, huge)
			check("Peek", err)
			short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			_, err = l.Wait(short, huge)
			cancel()
			require.Error(t, err, "%s: Wait on a full key within 20ms", name)
			check("Wait", err)
			cancelled, cancel := context.WithCancel(ctx)
			cancel()
			_, err = l.WaitN(cancelled, huge, 1)
			check("WaitN", err)
			check("Reset", l.Reset(ctx, huge))
		}
		_, err = comp.Allow(ctx, huge, huge)
		check("Composite.Allow", err)
		_, err = comp.AllowN(ctx, []string{huge, huge + "x"}, 1)
		check("Composite.AllowN", err)
		_, err = comp.Peek(ctx, huge, huge)
		check("Composite.Peek", err)
		check("Composite.Reset", comp.Reset(ctx, huge, huge))
		rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 1, Window: time.Hour}
		r := backend.Request{Key: backend.Key{Prefix: "d:", ID: huge}, Rule: rule, Now: time.Now(), Cost: 1}
		_, err = store.TakeAll(ctx, []backend.Request{r, r})
		require.Error(t, err, "%s: TakeAll of one key twice", name)
		check("TakeAll (same key twice)", err)
		check("Store.Reset", store.Reset(ctx, r.Key, rule, time.Now()))
	}
	require.Greater(t, calls, 100)
}

// net100ms bounds rueidis' dials, so calls to the killed server fail fast.
func net100ms() net.Dialer { return net.Dialer{Timeout: 100 * time.Millisecond} }
