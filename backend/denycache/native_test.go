package denycache_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// The Redis stores decide fixed windows with INCRBY and give a refused
// request's increments back (the native path). While a refused TakeAll's
// increment is in flight, another process can be refused by it and cache
// that denial though the store admits once the refund lands. The deny
// cache announces every refused TakeAll, so that entry ends when the
// announcement arrives. Here process A's increment in flight is made by
// hand (INCRBY, then DECRBY on the window's key), B is refused and caches,
// and A's refused TakeAll through its cache ends B's entry; B then agrees
// with its store. The control sends A's TakeAll around its cache:
// nothing is announced, and B's cache keeps denying what its store admits,
// which shows the test can fail (and why every process writing the keys
// must run a deny cache on the channel).
func TestNativeRefusalEndsCachedDenials(t *testing.T) {
	for name, mk := range bothClients() {
		t.Run(name, func(t *testing.T) {
			require.False(t, nativeRefusal(t, mk, "native:"+name+":", true), "B's cache denied what its store admits")
		})
	}
	t.Run("control", func(t *testing.T) {
		require.True(t, nativeRefusal(t, goredisProcess, "native:control:", false),
			"with A's refusal unannounced, B's cache should deny what its store admits: the test above can fail")
	})
}

// nativeRefusal runs the scenario and reports whether B's cache, in the
// end, denied what its store admits. announce sends A's TakeAll through
// its deny cache.
func nativeRefusal(t *testing.T, mk makeProcess, prefix string, announce bool) bool {
	srv := redistest.Start(t)
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = raw.Close() })
	a, b := mk(t, srv.Addr()), mk(t, srv.Addr())
	rule := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 3, Window: time.Hour}
	now := time.Now()
	for now.Truncate(time.Hour) != now.Add(time.Minute).Truncate(time.Hour) {
		time.Sleep(time.Second) // a minute clear of the window's end
		now = time.Now()
	}
	k := backend.Request{Key: backend.Key{Prefix: prefix, ID: "k"}, Rule: rule, Now: now, Cost: 1}
	j := backend.Request{Key: backend.Key{Prefix: prefix + "j:", ID: "j"}, Rule: algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Hour}, Now: now, Cost: 1}
	require.True(t, take(t, a.cache, j).Allowed)
	for range 2 {
		require.True(t, take(t, b.cache, k).Allowed)
	}
	// A's increment in flight: the window is full for a moment.
	key, _, _ := rediswire.NativeKey(&k)
	require.NoError(t, raw.IncrBy(t.Context(), key, 1).Err())
	denied := take(t, b.cache, k)
	require.False(t, denied.Allowed)
	require.Zero(t, denied.Remaining)
	require.Equal(t, 1, b.cache.Stats().Entries, "B caches the denial")
	// A's refund lands: the store admits one more.
	require.NoError(t, raw.DecrBy(t.Context(), key, 1).Err())
	// A's TakeAll over k and the full j is refused (and refunded).
	via := a.store
	if announce {
		via = a.cache
	}
	res, err := via.TakeAll(t.Context(), []backend.Request{k, j})
	require.NoError(t, err)
	require.False(t, res.Allowed)
	if announce {
		for deadline := time.Now().Add(10 * time.Second); b.cache.Stats().Entries > 0; time.Sleep(time.Millisecond) {
			require.True(t, time.Now().Before(deadline), "B never heard of A's refusal")
		}
	}
	want, err := b.store.Peek(t.Context(), k)
	require.NoError(t, err)
	require.True(t, want.Allowed, "the store admits one more")
	got := take(t, b.cache, k)
	return got.Allowed != want.Allowed
}
