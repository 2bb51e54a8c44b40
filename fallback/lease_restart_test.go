package fallback_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
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
	"github.com/limitkit/limitkit/backend/rueidisstore"
	"github.com/limitkit/limitkit/fallback"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/limiter"
)

// The lease restart load: restartCallers goroutines over two clients
// (go-redis and rueidis, each behind its own fallback store failing
// closed, as two processes would be) contend for restartLimit leases on
// one key, while the test holds restartPinned of them across the restart
// (half: the load keeps the other half busy).
const (
	restartCallers = 64
	restartLimit   = 16
	restartPinned  = 8
	// restartTimeout is the lease timeout: longer than the test, so no
	// lease expires while its holder works (that would be a legitimate
	// re-grant, not an over-admission).
	restartTimeout = time.Minute
	restartWait    = 20 * time.Second
	// restartCallTimeout bounds each call: generous, since with
	// appendfsync always each write waits for an fsync on a busy disk. A
	// Take that times out after Redis ran it holds a lease nobody
	// releases until its timeout: fewer slots, never more.
	restartCallTimeout = time.Second
)

// restartStores returns a go-redis and a rueidis store over addr, with
// short dial timeouts (a dead server is seen at once) and I/O timeouts
// above restartCallTimeout.
func restartStores(t *testing.T, addr string) []backend.Store {
	g := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 40,
		DialTimeout: itDialTimeout, ReadTimeout: 2 * restartCallTimeout, WriteTimeout: 2 * restartCallTimeout,
		PoolTimeout: 2 * restartCallTimeout, DialerRetries: 1, DialerRetryTimeout: 10 * time.Millisecond,
		ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = g.Close() })
	gs, err := goredisstore.New(g)
	require.NoError(t, err)
	r, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true,
		ConnWriteTimeout: 2 * restartCallTimeout, Dialer: net.Dialer{Timeout: itDialTimeout}})
	require.NoError(t, err)
	t.Cleanup(r.Close)
	rs, err := rueidisstore.New(r)
	require.NoError(t, err)
	return []backend.Store{gs, rs}
}

// restartRun is what one run of the load saw.
type restartRun struct {
	maxHeld         int64
	admittedBefore  int64 // before the kill
	admittedAfter   int64 // after the restart
	degradedDenials int64
	errs            int64
	// pinnedHeld counts the pinned leases Redis still held at the end.
	pinnedHeld int
}

// runLeaseRestart runs the load, kills redis-server with SIGKILL mid-load
// and restarts it on the same port and directory. With persist it runs
// with appendonly yes and appendfsync always: every write Redis answered
// is on disk before the answer, so the leases survive the kill. Without,
// the restarted Redis starts empty.
//
// Each caller counts itself in held after Acquire returned a lease and out
// before it calls Release, so held never exceeds the leases the store
// holds: held above the limit is an over-admission. A release that fails
// while Redis is down is retried until it succeeds (the lease stays held
// in Redis meanwhile).
func runLeaseRestart(t *testing.T, persist bool) restartRun {
	var opts []redistest.Option
	if persist {
		opts = append(opts, redistest.WithArgs("--appendonly", "yes", "--appendfsync", "always"))
	}
	srv := redistest.Start(t, opts...)
	var lims []*limiter.Limiter
	for _, primary := range restartStores(t, srv.Addr()) {
		fb := newStore(t, primary, fallback.WithPolicy(backend.FailClosed), fallback.WithTimeout(restartCallTimeout),
			fallback.WithFailureThreshold(itThreshold), fallback.WithOpenTimeout(itOpenTimeout), fallback.WithProbes(itProbes))
		lim, err := limiter.New(fb, limiter.Config{Algorithm: algorithms.Concurrency, Limit: restartLimit,
			Window: restartTimeout, Prefix: "restart:"})
		require.NoError(t, err)
		lims = append(lims, lim)
	}
	ctx := t.Context()
	const key = "k"

	var held, maxHeld, admitted, degradedDenials, errs atomic.Int64
	enter := func() {
		h := held.Add(1)
		for m := maxHeld.Load(); h > m && !maxHeld.CompareAndSwap(m, h); m = maxHeld.Load() {
		}
	}
	var pinned []*limiter.Lease
	for len(pinned) < restartPinned {
		lease, _, err := lims[0].Acquire(ctx, key)
		require.NoError(t, err)
		require.NotNil(t, lease)
		enter()
		pinned = append(pinned, lease)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range restartCallers {
		lim := lims[i%len(lims)]
		wg.Go(func() {
			for deadline := time.Now().Add(3 * restartWait); time.Now().Before(deadline); {
				select {
				case <-stop:
					return
				default:
				}
				lease, d, err := lim.Acquire(ctx, key)
				switch {
				case err != nil:
					errs.Add(1)
					time.Sleep(time.Millisecond)
					continue
				case lease == nil:
					if d.Degraded {
						degradedDenials.Add(1)
					}
					time.Sleep(time.Millisecond)
					continue
				}
				enter()
				admitted.Add(1)
				time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond) // the work
				held.Add(-1)
				for until := time.Now().Add(restartWait); ; time.Sleep(10 * time.Millisecond) {
					err := lease.Release(context.Background())
					if err == nil || errors.Is(err, limiter.ErrLeaseNotHeld) || time.Now().After(until) {
						break
					}
				}
			}
		})
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()

	waitForCount(t, &admitted, 300, "leases granted before the kill")
	var run restartRun
	run.admittedBefore = admitted.Load()
	srv.Kill()
	waitUntilFor(t, restartWait, "fail-closed denials during the outage", func() bool { return degradedDenials.Load() >= 100 })
	time.Sleep(200 * time.Millisecond)
	srv.Restart()
	restartedAt := admitted.Load()
	waitUntilFor(t, restartWait, "leases granted after the restart", func() bool { return admitted.Load() >= restartedAt+300 })
	close(stop)
	wg.Wait()

	run.maxHeld, run.admittedAfter = maxHeld.Load(), admitted.Load()-restartedAt
	run.degradedDenials, run.errs = degradedDenials.Load(), errs.Load()
	for _, lease := range pinned {
		err := lease.Release(ctx)
		if err == nil {
			run.pinnedHeld++
		} else {
			require.ErrorIs(t, err, limiter.ErrLeaseNotHeld)
		}
	}
	t.Logf("persist=%v: max held %d (limit %d), %d granted before the kill, %d after the restart, %d fail-closed denials, %d errors, %d of %d pinned leases kept",
		persist, run.maxHeld, restartLimit, run.admittedBefore, run.admittedAfter, run.degradedDenials, run.errs, run.pinnedHeld, restartPinned)
	return run
}

// TestLeasesNeverOverAdmittedAcrossRestart: never more than the limit's
// leases held on a key, under 64 callers over two clients, across a kill
// and restart of a Redis that persists every write (appendfsync always);
// the pinned leases survive the restart. The control restarts a Redis
// without persistence: it forgets the leases held, and the same load then
// holds more than the limit, which the count catches.
func TestLeasesNeverOverAdmittedAcrossRestart(t *testing.T) {
	t.Parallel() // mostly a restart's wait; servers of its own
	t.Run("appendonly", func(t *testing.T) {
		run := runLeaseRestart(t, true)
		require.LessOrEqual(t, run.maxHeld, int64(restartLimit), "over-admission across the restart")
		require.Equal(t, restartPinned, run.pinnedHeld, "Redis forgot leases across the restart")
		require.Positive(t, run.admittedAfter)
	})
	t.Run("control: no persistence", func(t *testing.T) {
		run := runLeaseRestart(t, false)
		require.Greater(t, run.maxHeld, int64(restartLimit),
			"a Redis restarted empty forgot %d held leases, and the load did not exceed the limit: the test cannot catch over-admission", restartPinned)
		require.Zero(t, run.pinnedHeld)
	})
}
