package goredisstore_test

import (
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/backend/storetest"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/internal/dev/scripttest"
	"github.com/limitkit/limitkit/internal/rediswire"
)

func newClient(t testing.TB, opt *redis.Options) *redis.Client {
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newStore(t testing.TB, client redis.UniversalClient, opts ...goredisstore.Option) *goredisstore.Store {
	s, err := goredisstore.New(client, opts...)
	require.NoError(t, err)
	return s
}

func TestNewRejectsNil(t *testing.T) {
	_, err := goredisstore.New(nil)
	require.Error(t, err)
}

func TestConformanceRedis(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, newClient(t, &redis.Options{Addr: srv.Addr()}))
	storetest.Run(t, s)
	scripttest.Differential(t.Context(), t, s, 1, 1500)
	scripttest.BatchedTakesStayExact(t, s, srv)
}

// TestConformanceRedisUnbatched runs the suite with every Take sent alone
// (the single-request scripts), as on a cluster or with replica
// acknowledgement.
func TestConformanceRedisUnbatched(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, newClient(t, &redis.Options{Addr: srv.Addr()}), goredisstore.WithBatching(1))
	storetest.Run(t, s)
	scripttest.Differential(t.Context(), t, s, 1, 1500)
	_, err := goredisstore.New(newClient(t, &redis.Options{Addr: srv.Addr()}), goredisstore.WithBatching(0))
	require.ErrorContains(t, err, "batch size 0")
}

func TestConformanceCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = client.Close() })
	s := newStore(t, client)
	storetest.Run(t, s)
	scripttest.Differential(t.Context(), t, s, 2, 500)
	scripttest.HostileIDsSpread(t, s, c)

	// No retry through the cluster client either. Few attempts, so that
	// the paused node is not failed by the cluster meanwhile.
	retrying := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: c.Addrs(), ReadTimeout: 150 * time.Millisecond, MaxRetries: 1, MaxRedirects: 1,
		MinRetryBackoff: time.Millisecond, MaxRetryBackoff: 2 * time.Millisecond,
	})
	t.Cleanup(func() { _ = retrying.Close() })
	t.Run("sent_once", func(t *testing.T) {
		sentOnce(t, retrying, func(key string) *redistest.Server { return c.MasterOf(redistest.KeySlot(key)) })
	})
}

// TestWritingScriptIsSentOnce hangs the server while a Take waits for its
// reply. go-redis times the read out and, for an ordinary command, sends it
// again (MaxRetries); the store's script must run at most once when the
// server wakes up, while the control, a plain EVALSHA of the same script
// through the same client, runs once per attempt.
func TestWritingScriptIsSentOnce(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, &redis.Options{
		Addr: srv.Addr(), ReadTimeout: 150 * time.Millisecond, MaxRetries: 3,
		MinRetryBackoff: time.Millisecond, MaxRetryBackoff: 2 * time.Millisecond,
	})
	sentOnce(t, client, func(string) *redistest.Server { return srv })
}

// sentOnce runs TestWritingScriptIsSentOnce's check through client;
// serverOf names the server holding a key.
func sentOnce(t *testing.T, client redis.UniversalClient, serverOf func(key string) *redistest.Server) {
	s := newStore(t, client)
	rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 100, Window: time.Hour}
	now := time.Now()
	store := backend.Request{Key: backend.Key{Prefix: "retry:", ID: "k"}, Rule: rule, Now: now, Cost: 1}
	storeKey := rediswire.Key(store.Key, rule)
	controlKey := storeKey + ":control" // same hash tag: same server
	srv := serverOf(storeKey)
	// Load the script so that the calls below are plain EVALSHAs.
	warm := store
	warm.Key.ID = "k}" // hashed, so in another slot: nothing of it lands on the keys above
	_, err := s.Take(t.Context(), warm)
	require.NoError(t, err)
	_, err = srv.Do("SCRIPT", "LOAD", scripttest.Source(t, algorithms.SlidingLog))
	require.NoError(t, err)
	// A connection made while the server hangs would time out in its
	// handshake, before the command is written: open and initialise enough
	// of them now, with commands that each hold a connection for a while.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { _ = client.Do(t.Context(), "BLPOP", storeKey+":nothing", "0.1").Err() })
	}
	wg.Wait()

	srv.Pause()
	_, err = s.Take(t.Context(), store)
	require.Error(t, err)
	sha := scripttest.SHA1(t, algorithms.SlidingLog)
	err = client.EvalSha(t.Context(), sha, []string{controlKey}, scripttest.Args(t, rule, now.UnixMilli(), 1, rediswire.ModeTake)).Err()
	require.Error(t, err)
	srv.Resume()

	control := scripttest.WaitCount(t, srv, controlKey, func(n int64) bool { return n > 1 })
	require.Greater(t, control, int64(1), "the control was not retried: the test cannot see a retry")
	got := scripttest.WaitCount(t, srv, storeKey, func(int64) bool { return true })
	require.LessOrEqual(t, got, int64(1), "the store's script ran %d times for one Take", got)
	t.Logf("one timed-out EVALSHA: store ran it %d times, the control %d times", got, control)
}

func TestServerTime(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, &redis.Options{Addr: srv.Addr()})
	scripttest.ServerTime(t, newStore(t, client, goredisstore.WithServerTime()))

	scripttest.ServerTimeProbe(t, goredisstore.ServerTime(client))
}

func TestPeekUsesReadOnlyScripts(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, newClient(t, &redis.Options{Addr: srv.Addr()}))
	scripttest.PeekIsReadOnly(t, s, srv)
}

func BenchmarkTake(b *testing.B) {
	srv := redistest.Start(b)
	client := newClient(b, &redis.Options{Addr: srv.Addr(), PoolSize: 64})
	scripttest.BenchmarkTake(b, newStore(b, client))
}

// BenchmarkLeases: a lease acquired and released (see
// scripttest.BenchmarkLeases).
func BenchmarkLeases(b *testing.B) {
	srv := redistest.Start(b)
	client := newClient(b, &redis.Options{Addr: srv.Addr(), PoolSize: 64})
	scripttest.BenchmarkLeases(b, newStore(b, client))
}

// TestBatchedPeeksAndTakeAlls: Peeks and TakeAlls batch on one server and
// per node on a cluster, decide exactly, and the controls fail as they
// should (see scripttest.BatchedPeeksAndTakeAlls).
func TestBatchedPeeksAndTakeAlls(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		srv := redistest.Start(t)
		client := newClient(t, &redis.Options{Addr: srv.Addr(), PoolSize: 16})
		scripttest.BatchedPeeksAndTakeAlls(t, newStore(t, client), newStore(t, client, goredisstore.WithBatching(1)),
			[]*redistest.Server{srv}, nil)
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t, 3, 0)
		client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), PoolSize: 16})
		t.Cleanup(func() { _ = client.Close() })
		scripttest.BatchedPeeksAndTakeAlls(t, newStore(t, client), newStore(t, client, goredisstore.WithBatching(1)),
			c.Masters, func(key string) *redistest.Server { return c.MasterOf(redistest.KeySlot(key)) })
	})
}

// TestNilOptionIgnored: New skips a nil Option and applies the ones after
// it (the refused batch size shows WithBatching(0) was applied). New does
// not contact the server, so none is started.
func TestNilOptionIgnored(t *testing.T) {
	c := newClient(t, &redis.Options{Addr: "127.0.0.1:1"})
	_, err := goredisstore.New(c, nil, goredisstore.WithBatching(2))
	require.NoError(t, err)
	_, err = goredisstore.New(c, nil, goredisstore.WithBatching(0))
	require.ErrorContains(t, err, "batch size 0")
}
