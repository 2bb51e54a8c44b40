package fallback_test

// A Redis blip continues from what Redis last said: on a real
// redis-server, with both clients, a 50-per-hour limit on fixed_window,
// sliding_log and gcra, 16 callers and a stall of about a second (SIGSTOP,
// or CLIENT PAUSE), a key Redis last reported spent admits nothing during
// the stall, one with 20 left at most 20, and a key Redis never answered
// for its policy's share (the control that local limiting still works).
// The control without baselines (WithBaselines(0)) admits the spent key's
// whole limit again: the test catches the bug it is about.

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/fallback"
	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// The keys of a blip scenario: spent on Redis, 20 left, never seen.
const (
	blipSpent = iota
	blipTwenty
	blipFresh
	blipKeys
)

var blipKeyNames = [blipKeys]string{"spent", "twenty", "fresh"}

// blipClock hands out request times: a fixed moment ten minutes into an
// hour plus the real time elapsed, so that a fixed window of an hour does
// not roll over during a scenario, whatever the wall clock says.
type blipClock struct {
	base, start time.Time
}

func newBlipClock() blipClock {
	return blipClock{base: time.Now().Truncate(time.Hour).Add(10 * time.Minute), start: time.Now()}
}

func (c blipClock) now() time.Time { return c.base.Add(time.Since(c.start)) }

// blipOutcome is what the callers saw during a stall, per key.
type blipOutcome struct {
	admitted [blipKeys]int64 // admissions, all degraded
	fresh    int64           // decisions that were not degraded
	calls    [blipKeys]int64
	lastSeen time.Time // the request time of the latest Redis answer before the stall
	late     [blipKeys]int64
	// twentyLeft is what Redis had left of the twenty key at the stall.
	twentyLeft int64
}

// stallKind freezes and thaws a server. A lingering one thaws only when
// its stall's time is up, however early thaw is called.
type stallKind struct {
	name        string
	stall, thaw func(t *testing.T, srv *redistest.Server)
	lingers     bool
}

var stallKinds = []stallKind{
	{name: "sigstop",
		stall: func(t *testing.T, srv *redistest.Server) { srv.Pause() },
		thaw:  func(t *testing.T, srv *redistest.Server) { srv.Resume() }},
	// CLIENT UNPAUSE from a client is itself paused: it returns only
	// when the 10 s are over.
	{name: "client-pause", lingers: true,
		stall: func(t *testing.T, srv *redistest.Server) {
			_, err := srv.Do("CLIENT", "PAUSE", "10000", "ALL")
			require.NoError(t, err)
		},
		thaw: func(t *testing.T, srv *redistest.Server) {
			// It waits out the rest of the pause: bounded by more than
			// the whole pause, not by Do's 10 s.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := srv.DoContext(ctx, "CLIENT", "UNPAUSE")
			require.NoError(t, err)
		}},
}

// runBlip spends the keys on Redis through a fallback store over primary,
// stalls the server, runs 16 callers through the stall (at least a second,
// and until the never-seen key had its share of calls and more), stops
// them, thaws the server, and reports what the callers saw.
func runBlip(t *testing.T, srv *redistest.Server, primary backend.Store, rule algorithms.Rule, sk stallKind, opts ...fallback.Option) blipOutcome {
	t.Helper()
	fb, err := fallback.New(primary, append([]fallback.Option{fallback.WithTimeout(100 * time.Millisecond),
		fallback.WithLogger(quietLogger())}, opts...)...)
	require.NoError(t, err)
	clk := newBlipClock()
	prefix := "blip:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	keys := [blipKeys]backend.Key{}
	for i := range keys {
		keys[i] = backend.Key{Prefix: prefix, ID: blipKeyNames[i]}
	}
	ctx := context.Background()
	// The keys are spent on Redis directly (a Take through the fallback
	// that missed its deadline on a loaded machine may still be counted
	// there), then peeked through the fallback store, which records Redis's
	// answers: a Peek writes nothing, so one that missed its deadline is
	// peeked again until Redis answers it.
	fill := func(k int, left int64) {
		for range 200 {
			if peekRetrying(t, primary, backend.Request{Key: keys[k], Rule: rule, Now: clk.now(), Cost: 1}).Remaining <= left {
				return
			}
			// An error is a client timeout: counted or not, the Peek tells.
			_, _ = primary.Take(ctx, backend.Request{Key: keys[k], Rule: rule, Now: clk.now(), Cost: 1})
		}
		t.Fatal("setup: the key was not spent in 200 tries")
	}
	var out blipOutcome
	fill(blipSpent, 0)
	fill(blipTwenty, 20)
	for k := range keys {
		answered := false
		for range 50 {
			res, err := fb.Peek(ctx, backend.Request{Key: keys[k], Rule: rule, Now: clk.now(), Cost: 1})
			require.NoError(t, err)
			if answered = !res.Degraded; answered {
				break
			}
		}
		require.True(t, answered, "setup: Redis did not answer a Peek within the deadline in 50 tries")
	}
	out.lastSeen = clk.now()
	before := [blipKeys]int64{}
	for k := range keys {
		before[k] = peekRetrying(t, primary, backend.Request{Key: keys[k], Rule: rule, Now: clk.now(), Cost: 1}).Remaining
	}
	require.Equal(t, int64(0), before[blipSpent])
	require.Equal(t, rule.Limit, before[blipFresh])
	require.LessOrEqual(t, before[blipTwenty], int64(20))
	require.GreaterOrEqual(t, before[blipTwenty], int64(18), "20 left, or 1 or 2 fewer if a timed-out Take ran")
	out.twentyLeft = before[blipTwenty]

	sk.stall(t, srv)
	stalledAt := time.Now()
	var stop atomic.Bool
	var wg sync.WaitGroup
	var mu sync.Mutex
	for c := range 16 {
		wg.Go(func() {
			for i := 0; i < 5000 && !stop.Load(); i++ {
				k := (c + i) % blipKeys
				res, err := fb.Take(ctx, backend.Request{Key: keys[k], Rule: rule, Now: clk.now(), Cost: 1})
				if err != nil {
					t.Errorf("caller %d: %v", c, err)
					return
				}
				mu.Lock()
				out.calls[k]++
				if res.Allowed {
					out.admitted[k]++
				}
				if !res.Degraded {
					out.fresh++
				}
				mu.Unlock()
				time.Sleep(time.Millisecond)
			}
		})
	}
	waitUntilFor(t, itWait, "a second of stall and the never-seen key's share of calls, twice over", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return time.Since(stalledAt) >= time.Second && out.calls[blipFresh] >= 2*rule.Limit
	})
	stop.Store(true)
	wg.Wait()
	sk.thaw(t, srv)

	// What reached Redis after its deadline: its count now against before
	// the stall (waited for until two reads 50 ms apart agree).
	var prev [blipKeys]int64
	for i := 0; i < 40; i++ {
		var cur [blipKeys]int64
		for k := range keys {
			res := peekRetrying(t, primary, backend.Request{Key: keys[k], Rule: rule, Now: clk.now(), Cost: 1})
			cur[k] = before[k] - res.Remaining
		}
		if i > 0 && cur == prev {
			break
		}
		prev = cur
		time.Sleep(50 * time.Millisecond)
	}
	out.late = prev
	return out
}

// peekRetrying peeks req on the primary, again after a client timeout (a
// loaded machine, or a server just thawed), at most 20 times.
func peekRetrying(t *testing.T, primary backend.Store, req backend.Request) backend.Result {
	t.Helper()
	var err error
	for range 20 {
		var res backend.Result
		if res, err = primary.Peek(context.Background(), req); err == nil {
			return res
		}
	}
	t.Fatalf("peek: %v", err)
	return backend.Result{}
}

// refill is what rule's bucket (Refills: gcra) refills between from and
// to (0 for the other algorithms): the most a baseline may let through beyond what
// Redis said was left.
func refill(rule algorithms.Rule, from, to time.Time) int64 {
	if a := algorithms.Lookup(rule.Algorithm); a == nil || !a.Refills {
		return 0
	}
	return int64(to.Sub(from)/time.Millisecond) * rule.Limit / rule.Window.Milliseconds()
}

func TestBlipContinuesFromRedis(t *testing.T) {
	redistest.Require(t)
	forEachClient(t, func(t *testing.T, cl itClient) {
		srv := redistest.Start(t)
		conn := cl.single(t, srv.Addr())
		// A lingering stall is mostly waiting for its pause to end: each
		// runs on a server of its own, all at once and beside the others
		// (t.Run from goroutines, not t.Parallel, which -parallel would
		// queue two at a time). They start first.
		var lingering sync.WaitGroup
		defer lingering.Wait()
		for i := range 2 * len(stallKinds) {
			sk := stallKinds[i%len(stallKinds)]
			if sk.lingers != (i < len(stallKinds)) {
				continue
			}
			for _, alg := range []algorithms.Name{algorithms.FixedWindow, algorithms.SlidingLog, algorithms.GCRA} {
				name := sk.name + "/" + string(alg)
				body := func(t *testing.T) {
					srv, store := srv, conn.store
					if sk.lingers {
						srv = redistest.Start(t)
						store = cl.single(t, srv.Addr()).store
					}
					rule := algorithms.Rule{Algorithm: alg, Limit: 50, Window: time.Hour}
					out := runBlip(t, srv, store, rule, sk)
					extra := refill(rule, out.lastSeen, newBlipClock().now().Add(time.Minute))
					t.Logf("FIGURE %s %s %s: admitted during the stall spent=%d twenty=%d fresh=%d (calls %v, %d not degraded); counted by Redis after their deadline: %v",
						cl.name, sk.name, alg, out.admitted[blipSpent], out.admitted[blipTwenty], out.admitted[blipFresh], out.calls, out.fresh, out.late)
					require.Zero(t, out.fresh, "a decision during the stall came from Redis")
					require.LessOrEqual(t, out.admitted[blipSpent], extra, "the key Redis reported spent admitted during the stall")
					require.LessOrEqual(t, out.admitted[blipTwenty], out.twentyLeft+extra, "the key with 20 left admitted more")
					require.GreaterOrEqual(t, out.admitted[blipFresh], rule.Limit, "control: the never-seen key got less than the policy's share")
					require.LessOrEqual(t, out.admitted[blipFresh], rule.Limit+extra, "the never-seen key got more than the policy's share")
				}
				if sk.lingers {
					lingering.Go(func() { t.Run(name, body) })
				} else {
					t.Run(name, body)
				}
			}
		}
		// The control: without baselines the spent key gets a whole new
		// limit during the stall, as it did before them.
		t.Run("control-without-baselines", func(t *testing.T) {
			rule := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 50, Window: time.Hour}
			out := runBlip(t, srv, conn.store, rule, stallKinds[0], fallback.WithBaselines(0))
			require.Equal(t, rule.Limit, out.admitted[blipSpent], "without baselines the spent key starts the stall at a fresh share")
			require.Equal(t, rule.Limit, out.admitted[blipTwenty])
		})
	})
}
