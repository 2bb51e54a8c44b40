package redisengine_test

// Concurrency leases on real redis-server processes: never more than N
// held under 64 callers over a go-redis and a rueidis store (with a
// non-atomic acquire as the control), a cross-slot TakeAll on a cluster
// whose denied leases give their rate units back, and the memory a lease
// key takes.

import (
	"context"
	"fmt"
	"strconv"
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
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/internal/dev/scripttest"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// leaseLoad is the exactness load: 64 callers, 16 per key on 4 keys, each
// acquiring, holding for a moment and releasing, at most perCaller times
// and for at most a bounded time. held counts, per key, the leases the
// callers hold: incremented after an admitted acquire, decremented before
// the release, so it never counts more than the store holds. It returns
// the most ever held on a key, the admissions and the errors.
type leaseLoad struct {
	held     [4]atomic.Int64
	most     atomic.Int64
	admitted atomic.Int64
	errs     atomic.Int64
	lastErr  atomic.Value
}

// acquirer takes a lease on key for caller, and returns the function that
// releases it (reporting whether it was still held).
type acquirer func(ctx context.Context, caller, key int) (release func() (bool, error), ok bool, err error)

func (l *leaseLoad) run(t *testing.T, limit int64, perCaller int, within time.Duration, stopOnExcess bool, acquire acquirer) {
	ctx := t.Context()
	stop := func() bool { return stopOnExcess && l.most.Load() > limit }
	load(64, perCaller, within, stop, func(caller int) (struct{}, bool) {
		k := caller % len(l.held)
		release, ok, err := acquire(ctx, caller, k)
		if err != nil {
			l.errs.Add(1)
			l.lastErr.Store(err.Error())
			return struct{}{}, false
		}
		if !ok {
			return struct{}{}, false
		}
		l.admitted.Add(1)
		n := l.held[k].Add(1)
		for {
			m := l.most.Load()
			if n <= m || l.most.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(200 * time.Microsecond) // hold it a moment
		l.held[k].Add(-1)
		if held, err := release(); err != nil || !held {
			l.errs.Add(1)
			l.lastErr.Store(fmt.Sprintf("release: held %v, %v", held, err))
		}
		return struct{}{}, true
	})
}

// TestLeasesNeverOverAdmit has 64 callers over two clients (a go-redis
// store and a rueidis store, batching on) acquire, hold and release leases
// of limit 3 on four keys: the leases held on a key never exceed 3. The
// control acquires without atomicity (a count, then an add, as two
// commands) under the same load and must exceed 3, so the check can see
// over-admission. The lease timeout (an hour) is far beyond the test, so
// no lease expires and the count is exact.
func TestLeasesNeverOverAdmit(t *testing.T) {
	srv := redistest.Start(t)
	gc := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 64})
	t.Cleanup(func() { _ = gc.Close() })
	gs, err := goredisstore.New(gc)
	require.NoError(t, err)
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(rc.Close)
	rs, err := rueidisstore.New(rc)
	require.NoError(t, err)
	leaseStores := []backend.LeaseStore{gs, rs}

	const limit = 3
	rule := algorithms.Rule{Algorithm: algorithms.Concurrency, Limit: limit, Window: time.Hour}
	prefix := fmt.Sprintf("leases:%d:", time.Now().UnixNano())
	req := func(key int) backend.Request {
		return backend.Request{Key: backend.Key{Prefix: prefix, ID: strconv.Itoa(key)}, Rule: rule, Now: time.Now(), Cost: 1}
	}

	var atomicLoad leaseLoad
	atomicLoad.run(t, limit, 60, 30*time.Second, false, func(ctx context.Context, caller, key int) (func() (bool, error), bool, error) {
		s := leaseStores[caller%2]
		res, err := s.Take(ctx, req(key))
		if err != nil || !res.Allowed {
			return nil, false, err
		}
		if res.Lease <= 0 {
			return nil, false, fmt.Errorf("admitted without a lease id: %+v", res)
		}
		return func() (bool, error) { return s.Release(ctx, req(key), res.Lease) }, true, nil
	})
	require.Zero(t, atomicLoad.errs.Load(), "errors: %v", atomicLoad.lastErr.Load())
	require.Greater(t, atomicLoad.admitted.Load(), int64(4*limit), "too little load to tell")
	require.Equal(t, int64(limit), atomicLoad.most.Load(), "leases held on one key at once")
	for k := range 4 {
		p, err := gs.Peek(t.Context(), req(k))
		require.NoError(t, err)
		require.Equal(t, int64(limit), p.Remaining, "key %d after every lease was released", k)
	}
	t.Logf("atomic: %d leases granted, at most %d held on a key", atomicLoad.admitted.Load(), atomicLoad.most.Load())

	// The control: the same load and check over a naive lease set, counted
	// then added by separate commands.
	naive := prefix + "naive:"
	var seq atomic.Int64
	var control leaseLoad
	control.run(t, limit, 60, 30*time.Second, true, func(ctx context.Context, caller, key int) (func() (bool, error), bool, error) {
		k := naive + strconv.Itoa(key)
		var n int64
		var err error
		if caller%2 == 0 {
			n, err = gc.ZCard(ctx, k).Result()
		} else {
			n, err = rc.Do(ctx, rc.B().Zcard().Key(k).Build()).AsInt64()
		}
		if err != nil || n >= limit {
			return nil, false, err
		}
		member := strconv.FormatInt(seq.Add(1), 10)
		if err := gc.ZAdd(ctx, k, redis.Z{Score: 1, Member: member}).Err(); err != nil {
			return nil, false, err
		}
		return func() (bool, error) {
			n, err := gc.ZRem(ctx, k, member).Result()
			return n == 1, err
		}, true, nil
	})
	require.Zero(t, control.errs.Load(), "control errors: %v", control.lastErr.Load())
	require.Greater(t, control.most.Load(), int64(limit), "the control never over-admitted: the check could not see it")
	t.Logf("control: %d leases granted, at most %d held on a key", control.admitted.Load(), control.most.Load())
}

// TestLeaseTakeAllAcrossSlots has callers on a Redis Cluster take a rate
// unit and a lease whose keys are in different slots (TakeAll checks, then
// takes in order, and refunds when a later take is denied after all), each
// releasing its lease at once: every rate unit taken belongs to an
// admission, so a denied lease gave its unit back.
func TestLeaseTakeAllAcrossSlots(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = client.Close() })
	s, err := goredisstore.New(client)
	require.NoError(t, err)
	prefix := fmt.Sprintf("xslot:%d:", time.Now().UnixNano())
	rate := backend.Request{Key: backend.Key{Prefix: prefix + "rate:", ID: "a"},
		Rule: algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 10_000, Window: time.Hour}, Cost: 1}
	lease := backend.Request{Key: backend.Key{Prefix: prefix + "lease:", ID: "b"},
		Rule: algorithms.Rule{Algorithm: algorithms.Concurrency, Limit: 1, Window: time.Hour}, Cost: 1}
	require.NotEqual(t, redistest.KeySlot(rediswire.Key(rate.Key, rate.Rule)), redistest.KeySlot(rediswire.Key(lease.Key, lease.Rule)))

	var admitted, denied atomic.Int64
	results := load(16, 40, 20*time.Second, func() bool { return false }, func(int) (error, bool) {
		now := time.Now()
		r, l := rate, lease
		r.Now, l.Now = now, now
		res, err := s.TakeAll(t.Context(), []backend.Request{r, l})
		if err != nil {
			return err, true
		}
		if !res.Allowed {
			if res.Lease != 0 {
				return fmt.Errorf("denied with a lease: %+v", res), true
			}
			denied.Add(1)
			return nil, false
		}
		admitted.Add(1)
		if res.Lease <= 0 {
			return fmt.Errorf("admitted without a lease: %+v", res), true
		}
		l.Now = time.Now()
		if held, err := s.Release(t.Context(), l, res.Lease); err != nil || !held {
			return fmt.Errorf("release: held %v, %v", held, err), true
		}
		return nil, false
	})
	require.Empty(t, results)
	require.Positive(t, denied.Load(), "no lease was ever denied: no contention")
	r := rate
	r.Now = time.Now()
	p, err := s.Peek(t.Context(), r)
	require.NoError(t, err)
	require.Equal(t, rate.Rule.Limit-admitted.Load(), p.Remaining, "rate units taken beyond the admissions (%d admitted, %d denied)", admitted.Load(), denied.Load())
	require.Zero(t, s.FailedRefunds())
}

// TestLeaseMemoryUsage measures MEMORY USAGE of a concurrency key holding
// L leases of cost 1 (the README's memory per key).
func TestLeaseMemoryUsage(t *testing.T) {
	srv := redistest.Start(t)
	store := stores(t, srv, nil, nil)[0]
	prefix := fmt.Sprintf("leasemem:%d:", time.Now().UnixNano())
	now := time.Now()
	out := ""
	for _, l := range []int64{1, 10, 100, 1000} {
		rule := algorithms.Rule{Algorithm: algorithms.Concurrency, Limit: l, Window: time.Hour}
		key := backend.Key{Prefix: prefix, ID: strconv.FormatInt(l, 10)}
		for range l {
			res, err := store.Take(t.Context(), backend.Request{Key: key, Rule: rule, Now: now, Cost: 1})
			require.NoError(t, err)
			require.True(t, res.Allowed)
		}
		name := rediswire.Key(key, rule)
		require.Equal(t, l, scripttest.Count(t, srv, name), "one member per lease unit")
		bytes, enc := scripttest.MemoryUsage(t, srv, name)
		out += fmt.Sprintf("%6d leases held: %6d bytes (%s)\n", l, bytes, enc)
	}
	t.Logf("MEMORY USAGE of a concurrency key on redis-server:\n%s", out)
}
