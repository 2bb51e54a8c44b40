package redisengine_test

// Tests of both Redis stores together against real redis-server processes:
// no over-admission under concurrency (with a naive limiter as the
// control), NOSCRIPT after SCRIPT FLUSH and after a restart, and the memory
// a sliding-log key takes.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
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
	"github.com/limitkit/limitkit/backend/storetest"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/internal/dev/scripttest"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// stores returns two go-redis stores and two rueidis stores, each over its
// own client of srv.
func stores(t *testing.T, srv *redistest.Server, goOpts []goredisstore.Option, rueidisOpts []rueidisstore.Option) []backend.Store {
	t.Helper()
	var out []backend.Store
	for range 2 {
		gc := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 32})
		t.Cleanup(func() { _ = gc.Close() })
		gs, err := goredisstore.New(gc, goOpts...)
		require.NoError(t, err)
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
		require.NoError(t, err)
		t.Cleanup(rc.Close)
		rs, err := rueidisstore.New(rc, rueidisOpts...)
		require.NoError(t, err)
		out = append(out, gs, rs)
	}
	return out
}

// load runs callers goroutines, each calling do until stop reports true, at
// most perCaller times, and all for at most limit. The values do returns
// with true are collected.
func load[T any](callers, perCaller int, limit time.Duration, stop func() bool, do func(caller int) (T, bool)) []T {
	deadline := time.Now().Add(limit)
	results := make([][]T, callers)
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for range perCaller {
				if stop() || time.Now().After(deadline) {
					return
				}
				if v, ok := do(c); ok {
					results[c] = append(results[c], v)
				}
			}
		})
	}
	wg.Wait()
	return slices.Concat(results...)
}

// span is when an admission happened as seen by its caller: the server
// decided at some millisecond in [from, to] (one clock: the same machine).
type span struct{ from, to int64 }

func spanOf(start time.Time) span { return span{start.UnixMilli(), time.Now().UnixMilli()} }

// maxInWindow returns the largest number of admissions certainly inside
// one sliding window (x-w, x]: those whose whole span is in it.
func maxInWindow(spans []span, w int64) int {
	most := 0
	for _, x := range spans {
		n := 0
		for _, s := range spans {
			if s.from > x.to-w && s.to <= x.to {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}

// maxInAligned returns the largest number of admissions certainly inside
// one window aligned to the epoch.
func maxInAligned(spans []span, w int64) int {
	counts := map[int64]int{}
	most := 0
	for _, s := range spans {
		if k := s.from / w; k == s.to/w {
			counts[k]++
			most = max(most, counts[k])
		}
	}
	return most
}

// TestNoOverAdmission has 64 goroutines over four clients of both libraries
// hit one key with a limit of 100 per 200 ms, at the real time, for several
// windows, and checks
// every window of the admissions. A naive limiter (ZREMRANGEBYSCORE, ZCARD
// and ZADD as separate commands) under the same load and the same check
// must over-admit: the check can see over-admission.
//
// The stores decide at the server's time (WithServerTime), and each
// admission is placed by the span of its call. With the callers' own
// times, calls overtake each other between reading the clock and reaching
// Redis, so they are decided out of timestamp order: the counter algorithms
// charge a late request to the newest window they have seen (so that a
// clock stepping back never reopens a window), which an audit by timestamp
// sees as extra admissions in the window before. The sliding log keeps
// slid-out entries a window longer for such late requests and stays exact by
// timestamp; TestNoOverAdmissionClientTime checks that.
func TestNoOverAdmission(t *testing.T) {
	srv := redistest.Start(t)
	all := stores(t, srv, []goredisstore.Option{goredisstore.WithServerTime()}, []rueidisstore.Option{rueidisstore.WithServerTime()})
	const limit, callers, perCaller = 100, 64, 800
	w := 200 * time.Millisecond
	prefix := fmt.Sprintf("overadmit:%d:", time.Now().UnixNano())
	for _, alg := range algorithms.Names() {
		rule := algorithms.Rule{Algorithm: alg, Limit: limit, Window: w}
		var denied, failed atomic.Int64
		spans := load(callers, perCaller, 1500*time.Millisecond, func() bool { return failed.Load() > 0 },
			func(c int) (span, bool) {
				start := time.Now()
				res, err := all[c%len(all)].Take(t.Context(), backend.Request{
					Key: backend.Key{Prefix: prefix, ID: "hot"}, Rule: rule, Now: start, Cost: 1})
				if err != nil {
					failed.Add(1)
					t.Errorf("%s: Take: %v", alg, err)
					return span{}, false
				}
				if !res.Allowed {
					denied.Add(1)
				}
				return spanOf(start), res.Allowed
			})
		require.Zero(t, failed.Load())
		require.Positive(t, denied.Load(), "%s: the limit was never reached", alg)
		require.Greater(t, len(spans), 2*limit, "%s: the load did not span several windows", alg)
		most := maxInAligned(spans, w.Milliseconds())
		if alg == algorithms.SlidingLog {
			most = maxInWindow(spans, w.Milliseconds())
		}
		bound := limit
		if alg == algorithms.GCRA {
			bound = 2 * limit // a full bucket, then a window's refill
		}
		require.LessOrEqual(t, most, bound, "%s admitted %d in one window", alg, most)
		t.Logf("%s: %d admitted, %d denied, at most %d certainly in one window", alg, len(spans), denied.Load(), most)
	}

	// The control: read the time, then trim, count and add as separate
	// commands.
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: callers})
	defer client.Close()
	worst := 0
	for attempt := 0; attempt < 3 && worst <= limit; attempt++ {
		key := fmt.Sprintf("%snaive:%d", prefix, attempt)
		var seq atomic.Int64
		spans := load(callers, perCaller, time.Second, func() bool { return false }, func(int) (span, bool) {
			ctx := t.Context()
			start := time.Now()
			now, err := client.Time(ctx).Result()
			if err != nil {
				return span{}, false
			}
			ms := now.UnixMilli()
			client.ZRemRangeByScore(ctx, key, "0", strconv.FormatInt(ms-w.Milliseconds(), 10))
			n, err := client.ZCard(ctx, key).Result()
			if err != nil || n >= limit {
				return span{}, false
			}
			member := strconv.FormatInt(seq.Add(1), 10)
			if client.ZAdd(ctx, key, redis.Z{Score: float64(ms), Member: member}).Err() != nil {
				return span{}, false
			}
			return spanOf(start), true
		})
		worst = maxInWindow(spans, w.Milliseconds())
		t.Logf("naive limiter, attempt %d: %d admitted, at most %d certainly in one window (limit %d)", attempt, len(spans), worst, limit)
	}
	require.Greater(t, worst, limit, "the naive limiter never over-admitted: the check cannot see over-admission")
}

// TestNoOverAdmissionClientTime: the sliding log at the callers' own
// timestamps, decided in whatever order the calls reach Redis, never holds
// more than the limit in any window of those timestamps.
func TestNoOverAdmissionClientTime(t *testing.T) {
	srv := redistest.Start(t)
	all := stores(t, srv, nil, nil)
	const limit, callers, perCaller = 100, 64, 800
	w := 200 * time.Millisecond
	rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: limit, Window: w}
	key := backend.Key{Prefix: fmt.Sprintf("overadmit-client:%d:", time.Now().UnixNano()), ID: "hot"}
	var denied, failed, latest atomic.Int64
	stamps := load(callers, perCaller, 1500*time.Millisecond, func() bool { return failed.Load() > 0 },
		func(c int) (span, bool) {
			now := time.Now()
			res, err := all[c%len(all)].Take(t.Context(), backend.Request{Key: key, Rule: rule, Now: now, Cost: 1})
			for late := int64(time.Since(now)); ; {
				old := latest.Load()
				if late <= old || latest.CompareAndSwap(old, late) {
					break
				}
			}
			if err != nil {
				failed.Add(1)
				t.Errorf("Take: %v", err)
				return span{}, false
			}
			if !res.Allowed {
				denied.Add(1)
			}
			ms := now.UnixMilli()
			return span{ms, ms}, res.Allowed
		})
	require.Zero(t, failed.Load())
	require.Positive(t, denied.Load(), "the limit was never reached")
	require.Greater(t, len(stamps), 2*limit, "the load did not span several windows")
	most := maxInWindow(stamps, w.Milliseconds())
	// The log keeps a slid-out unit one more window for late requests
	// (docs/algorithms.md): the promise covers requests that reach Redis
	// within a window of their timestamp. A loaded machine can hold a call
	// back longer than this 200 ms window; only then may a window hold more.
	late := time.Duration(latest.Load())
	if late < w {
		require.LessOrEqual(t, most, limit, "admitted %d in one window of timestamps (no call arrived a window late: at most %v)", most, late)
	}
	t.Logf("sliding log at client time: %d admitted, %d denied, at most %d in one window, the latest call %v after its timestamp", len(stamps), denied.Load(), most, late)
}

// TestScriptFlushUnderLoad flushes the script cache again and again while
// both libraries take from one key: every call succeeds (NOSCRIPT falls back
// to EVAL) and the key holds exactly the admissions (nothing ran twice).
func TestScriptFlushUnderLoad(t *testing.T) {
	srv := redistest.Start(t)
	all := stores(t, srv, nil, nil)
	rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: algorithms.MaxSlidingLogLimit, Window: time.Hour}
	key := backend.Key{Prefix: fmt.Sprintf("flush:%d:", time.Now().UnixNano()), ID: "k"}
	const total = 6000
	var started, failed atomic.Int64
	done := make(chan []int64)
	go func() {
		done <- load(32, total, 20*time.Second, func() bool { return started.Add(1) > total }, func(c int) (int64, bool) {
			res, err := all[c%len(all)].Take(context.Background(), backend.Request{Key: key, Rule: rule, Now: time.Now(), Cost: 1})
			if err != nil {
				failed.Add(1)
				t.Errorf("Take during SCRIPT FLUSH: %v", err)
				return 0, false
			}
			return 1, res.Allowed
		})
	}()
	flushes := 0
	for flushes < 20 && started.Load() < total {
		_, err := srv.Do("SCRIPT", "FLUSH")
		require.NoError(t, err)
		flushes++
		time.Sleep(10 * time.Millisecond)
	}
	admitted := <-done
	require.Zero(t, failed.Load())
	require.Len(t, admitted, total, "every request fits the limit")
	require.Equal(t, int64(total), scripttest.Count(t, srv, rediswire.Key(key, rule)), "admissions and the key's count differ")
	t.Logf("%d flushes, %d EVAL fallbacks, %d admissions, none lost or doubled", flushes, scripttest.EvalCalls(t, srv), len(admitted))
	require.Greater(t, scripttest.EvalCalls(t, srv), len(all), "the flushes never forced a fallback to EVAL")
}

type outcome struct {
	start, end time.Time
	err        error
	allowed    bool
}

// TestRestartUnderLoad restarts the server (empty, no scripts) while both
// libraries take from one key. Calls in flight or sent while it is down
// fail with errors, never with denials; every call sent after it is back
// succeeds; and the new server's count lies between the admissions
// answered after the restart and those answered after it began.
func TestRestartUnderLoad(t *testing.T) {
	srv := redistest.Start(t)
	all := stores(t, srv, nil, nil)
	rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: algorithms.MaxSlidingLogLimit, Window: time.Hour}
	key := backend.Key{Prefix: fmt.Sprintf("restart:%d:", time.Now().UnixNano()), ID: "k"}
	var answered, after atomic.Int64
	var restarted atomic.Bool
	done := make(chan []outcome)
	go func() {
		done <- load(16, 5000, 20*time.Second, func() bool { return after.Load() >= 2000 }, func(c int) (outcome, bool) {
			o := outcome{start: time.Now()}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			res, err := all[c%len(all)].Take(ctx, backend.Request{Key: key, Rule: rule, Now: time.Now(), Cost: 1})
			cancel()
			o.end, o.err, o.allowed = time.Now(), err, res.Allowed
			if err != nil {
				time.Sleep(2 * time.Millisecond) // the server is down: do not spin
			} else {
				answered.Add(1)
				if restarted.Load() {
					after.Add(1)
				}
			}
			return o, true
		})
	}()
	for deadline := time.Now().Add(10 * time.Second); answered.Load() < 500; {
		require.True(t, time.Now().Before(deadline), "no load before the restart")
		time.Sleep(time.Millisecond)
	}
	began := time.Now()
	srv.Pause() // no reply leaves the old server from here on
	srv.Restart()
	back := time.Now()
	restarted.Store(true)
	outcomes := <-done

	var errs, lateErrs, sinceBegan, sinceBack int
	for _, o := range outcomes {
		if o.err != nil {
			errs++
			if o.start.After(back) {
				lateErrs++
				t.Errorf("a call sent %v after the restart failed: %v", o.start.Sub(back), o.err)
			}
			continue
		}
		require.True(t, o.allowed, "a denial under a limit no call reaches")
		if o.end.After(began) {
			sinceBegan++
		}
		if o.end.After(back) {
			sinceBack++
		}
	}
	count := int(scripttest.Count(t, srv, rediswire.Key(key, rule)))
	t.Logf("restart took %v; %d calls, %d errors (all sent before the server was back), new server holds %d; admissions answered after the restart began: %d, after it ended: %d",
		back.Sub(began), len(outcomes), errs, count, sinceBegan, sinceBack)
	require.GreaterOrEqual(t, sinceBack, 2000)
	require.GreaterOrEqual(t, count, sinceBack, "admissions lost")
	require.LessOrEqual(t, count, sinceBegan, "admissions counted twice")
	require.Zero(t, lateErrs)
}

// TestMemoryUsage measures MEMORY USAGE of a sliding-log key after L
// admissions (one per millisecond), next to the usual "timestamp:uuid"
// members, and of the counter algorithms' keys.
func TestMemoryUsage(t *testing.T) {
	srv := redistest.Start(t)
	store := stores(t, srv, nil, nil)[0]
	prefix := fmt.Sprintf("mem:%d:", time.Now().UnixNano())
	rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: algorithms.MaxSlidingLogLimit, Window: time.Hour}
	base := time.Now().UnixMilli()
	var table strings.Builder
	fmt.Fprintf(&table, "%6s %10s %10s %14s %10s\n", "L", "bytes", "encoding", "ts:uuid bytes", "encoding")
	for _, l := range []int{10, 100, 127, 128, 1000} {
		key := backend.Key{Prefix: prefix, ID: strconv.Itoa(l)}
		for i := range l {
			res, err := store.Take(t.Context(), backend.Request{Key: key, Rule: rule, Now: time.UnixMilli(base + int64(i)), Cost: 1})
			require.NoError(t, err)
			require.True(t, res.Allowed)
		}
		name := rediswire.Key(key, rule)
		require.Equal(t, int64(l), scripttest.Count(t, srv, name))
		bytes, enc := scripttest.MemoryUsage(t, srv, name)

		// The usual script's members: "<ms>:<uuid>".
		ref := name + ":ref"
		args := []string{"ZADD", ref}
		for i := range l {
			args = append(args, strconv.FormatInt(base+int64(i), 10),
				fmt.Sprintf("%d:%08x-%04x-4%03x-a%03x-%012x", base+int64(i), i*7919, i%65536, i%4096, i%4096, i*104729))
		}
		_, err := srv.Do(args...)
		require.NoError(t, err)
		refBytes, refEnc := scripttest.MemoryUsage(t, srv, ref)
		fmt.Fprintf(&table, "%6d %10d %10s %14d %10s\n", l, bytes, enc, refBytes, refEnc)
		if l == 100 {
			require.LessOrEqual(t, bytes, int64(2500), "sliding-log key at L=100")
		}
	}
	// A key kept full: L admissions in one window, L more in the next,
	// the first L slid out but kept a window for late requests.
	fmt.Fprintf(&table, "\nkept full across two windows (w = 1 min):\n%14s %6s %10s %10s %8s\n", "algorithm", "L", "bytes", "encoding", "entries")
	for _, alg := range []algorithms.Name{algorithms.SlidingLog, algorithms.CompactLog} {
		for _, l := range []int64{10, 50, 63, 64, 100, 1000} {
			r := algorithms.Rule{Algorithm: alg, Limit: l, Window: time.Minute}
			key := backend.Key{Prefix: prefix, ID: fmt.Sprintf("full:%s:%d", alg, l)}
			for i := range 2 * l {
				now := base + i/l*time.Minute.Milliseconds() + i%l
				res, err := store.Take(t.Context(), backend.Request{Key: key, Rule: r, Now: time.UnixMilli(now), Cost: 1})
				require.NoError(t, err)
				require.True(t, res.Allowed)
			}
			name := rediswire.Key(key, r)
			bytes, enc := scripttest.MemoryUsage(t, srv, name)
			entries := "-"
			if alg == algorithms.SlidingLog {
				entries = strconv.FormatInt(scripttest.Count(t, srv, name), 10)
			}
			fmt.Fprintf(&table, "%14s %6d %10d %10s %8s\n", alg, l, bytes, enc, entries)
		}
	}
	for _, alg := range []algorithms.Name{algorithms.SlidingCounter, algorithms.FixedWindow} {
		r := algorithms.Rule{Algorithm: alg, Window: time.Hour}
		r.Limit = r.LimitBound()
		key := backend.Key{Prefix: prefix, ID: "counter"}
		req := backend.Request{Key: key, Rule: r, Now: time.Now(), Cost: 1 << 40}
		_, err := store.Take(t.Context(), req)
		require.NoError(t, err)
		name := rediswire.Key(key, r)
		if alg == algorithms.FixedWindow {
			name, _, _ = rediswire.NativeKey(&req) // a key per window
		}
		bytes, enc := scripttest.MemoryUsage(t, srv, name)
		fmt.Fprintf(&table, "%s key: %d bytes (%s)\n", alg, bytes, enc)
	}
	t.Logf("MEMORY USAGE on redis-server:\n%s", table.String())
}

// TestSentinel runs the conformance suite through a go-redis failover
// client and a rueidis sentinel client, then kills the master: once the
// sentinels have promoted the replica (which never saw the scripts: they
// are not replicated), both stores decide again without any change.
func TestSentinel(t *testing.T) {
	sn := redistest.StartSentinel(t)
	gc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: sn.MasterName, SentinelAddrs: sn.SentinelAddrs()})
	t.Cleanup(func() { _ = gc.Close() })
	gs, err := goredisstore.New(gc)
	require.NoError(t, err)
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: sn.SentinelAddrs(), DisableCache: true,
		Sentinel: rueidis.SentinelOption{MasterSet: sn.MasterName}})
	require.NoError(t, err)
	t.Cleanup(rc.Close)
	rs, err := rueidisstore.New(rc)
	require.NoError(t, err)
	named := map[string]backend.Store{"goredisstore": gs, "rueidisstore": rs}
	for name, s := range named {
		t.Run(name, func(t *testing.T) { storetest.Run(t, s) })
	}

	sn.Master.Kill()
	rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 1000, Window: time.Hour}
	for name, s := range named {
		req := backend.Request{Key: backend.Key{Prefix: fmt.Sprintf("failover:%d:", time.Now().UnixNano()), ID: name},
			Rule: rule, Now: time.Now(), Cost: 1}
		var lastErr error
		deadline := time.Now().Add(30 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			res, err := s.Take(ctx, req)
			cancel()
			if err == nil {
				require.True(t, res.Allowed, name)
				break
			}
			lastErr = err
			require.True(t, time.Now().Before(deadline), "%s: no decision 30 s after the master died: %v", name, lastErr)
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("%s decides again after the failover (last error while it ran: %v)", name, lastErr)
	}
	master, err := sn.CurrentMaster()
	require.NoError(t, err)
	require.Equal(t, sn.Replica.Addr(), master)
}
