package rueidisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/rueidisstore"
	"github.com/limitkit/limitkit/backend/storetest"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/internal/dev/scripttest"
	"github.com/limitkit/limitkit/internal/rediswire"
)

func newClient(t testing.TB, opt rueidis.ClientOption) rueidis.Client {
	opt.DisableCache = true
	c, err := rueidis.NewClient(opt)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func newStore(t testing.TB, client rueidis.Client, opts ...rueidisstore.Option) *rueidisstore.Store {
	s, err := rueidisstore.New(client, opts...)
	require.NoError(t, err)
	return s
}

func TestNewRejectsNil(t *testing.T) {
	_, err := rueidisstore.New(nil)
	require.Error(t, err)
}

func TestConformanceRedis(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, newClient(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}}))
	storetest.Run(t, s)
	scripttest.Differential(t.Context(), t, s, 3, 1500)
	scripttest.BatchedTakesStayExact(t, s, srv)
}

// TestConformanceRedisUnbatched runs the suite with every Take sent alone
// (the single-request scripts), as on a cluster or with replica
// acknowledgement.
func TestConformanceRedisUnbatched(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, newClient(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}}), rueidisstore.WithBatching(1))
	storetest.Run(t, s)
	scripttest.Differential(t.Context(), t, s, 3, 1500)
	_, err := rueidisstore.New(newClient(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}}), rueidisstore.WithBatching(0))
	require.ErrorContains(t, err, "batch size 0")
}

func TestConformanceCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	s := newStore(t, newClient(t, rueidis.ClientOption{InitAddress: c.Addrs()}))
	storetest.Run(t, s)
	scripttest.Differential(t.Context(), t, s, 4, 500)
	scripttest.HostileIDsSpread(t, s, c)
}

// TestWritingScriptIsSentOnce hangs the server while a Take and a control
// (the same EVALSHA marked retryable) wait for their replies on one
// pipelined connection, until rueidis gives the connection up. rueidis
// re-sends the control on a new connection; the store's script must run
// exactly once.
func TestWritingScriptIsSentOnce(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}, ConnWriteTimeout: 300 * time.Millisecond})
	s := newStore(t, client)
	rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 100, Window: time.Hour}
	now := time.Now()
	req := func(id string) backend.Request {
		return backend.Request{Key: backend.Key{Prefix: "retry:", ID: id}, Rule: rule, Now: now, Cost: 1}
	}
	_, err := s.Take(t.Context(), req("warm"))
	require.NoError(t, err)
	src, err := rediswire.Script(algorithms.SlidingLog) // the control's script
	require.NoError(t, err)
	_, err = srv.Do("SCRIPT", "LOAD", src)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	controlKey := rediswire.Key(req("control").Key, rule)
	control := make(chan error, 1)
	srv.Pause()
	go func() {
		cmd := client.B().Evalsha().Sha1(scripttest.SHA1(t, algorithms.SlidingLog)).Numkeys(1).Key(controlKey).
			Arg(scripttest.Args(t, rule, now.UnixMilli(), 1, rediswire.ModeTake)...).Build().ToRetryable()
		control <- client.Do(ctx, cmd).Error()
	}()
	time.Sleep(50 * time.Millisecond) // let the control reach the socket first (not required)
	_, err = s.Take(ctx, req("store"))
	require.Error(t, err)
	require.NoError(t, ctx.Err(), "the Take should fail with the connection, not the test's deadline")
	srv.Resume()
	// The control's connection broke, so its success means rueidis sent it
	// again (or, if it had not reached the socket yet, for the first time).
	require.NoError(t, <-control, "the control was not retried: the test cannot see a retry")

	controlRuns := scripttest.WaitCount(t, srv, controlKey, func(n int64) bool { return n >= 1 })
	got := scripttest.WaitCount(t, srv, rediswire.Key(req("store").Key, rule), func(int64) bool { return true })
	require.LessOrEqual(t, got, int64(1), "the store's script ran %d times for one Take", got)
	t.Logf("one EVALSHA on a dropped connection: store ran it once, the retryable control %d times", controlRuns)
}

// TestTimedOutTakeRunsAtMostOnce: a Take whose context ends while the
// server hangs may or may not have run (rueidis may not even have written
// it yet), but it must not run twice.
func TestTimedOutTakeRunsAtMostOnce(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, newClient(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}}))
	rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 100, Window: time.Hour}
	req := backend.Request{Key: backend.Key{Prefix: "timeout:", ID: "k"}, Rule: rule, Now: time.Now(), Cost: 1}
	_, err := s.Take(t.Context(), req)
	require.NoError(t, err)
	srv.Pause()
	ctx, cancel := context.WithTimeout(t.Context(), 150*time.Millisecond)
	_, err = s.Take(ctx, req)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	srv.Resume()
	n := scripttest.WaitCount(t, srv, rediswire.Key(req.Key, rule), func(n int64) bool { return n >= 1 })
	require.LessOrEqual(t, n, int64(2))
}

func TestServerTime(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
	scripttest.ServerTime(t, newStore(t, client, rueidisstore.WithServerTime()))

	scripttest.ServerTimeProbe(t, rueidisstore.ServerTime(client))
}

func TestPeekUsesReadOnlyScripts(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, newClient(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}}))
	scripttest.PeekIsReadOnly(t, s, srv)
}

func BenchmarkTake(b *testing.B) {
	srv := redistest.Start(b)
	client := newClient(b, rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
	scripttest.BenchmarkTake(b, newStore(b, client))
}

// BenchmarkLeases: a lease acquired and released (see
// scripttest.BenchmarkLeases).
func BenchmarkLeases(b *testing.B) {
	srv := redistest.Start(b)
	client := newClient(b, rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
	scripttest.BenchmarkLeases(b, newStore(b, client))
}

// TestBatchedPeeksAndTakeAlls: Peeks and TakeAlls batch on one server and
// per node on a cluster, decide exactly, and the controls fail as they
// should (see scripttest.BatchedPeeksAndTakeAlls).
func TestBatchedPeeksAndTakeAlls(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		srv := redistest.Start(t)
		client := newClient(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
		scripttest.BatchedPeeksAndTakeAlls(t, newStore(t, client), newStore(t, client, rueidisstore.WithBatching(1)),
			[]*redistest.Server{srv}, nil)
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t, 3, 0)
		client := newClient(t, rueidis.ClientOption{InitAddress: c.Addrs()})
		scripttest.BatchedPeeksAndTakeAlls(t, newStore(t, client), newStore(t, client, rueidisstore.WithBatching(1)),
			c.Masters, func(key string) *redistest.Server { return c.MasterOf(redistest.KeySlot(key)) })
	})
}
