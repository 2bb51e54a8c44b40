package fallback_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/fallback"
	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// TestEmptiedRedisHoldsWhatWasCounted: a key spent on a real redis-server
// (50 of 50 an hour) and one with 20 left, Redis stopped (SIGSTOP) until
// the breaker opens and a second passed, then restarted without
// persistence (empty), and the calls go on until 200 after the breaker
// closed. In the window, counting everything admitted before, during and
// after, the spent key admits at most 50 and the other at most 50: the
// breaker's opening holds the answers Redis gave before it until their
// reset. The same with Redis resumed (it kept its counts): at most the
// limit, and the twenty key still gets close to it (nothing refused that
// Redis had left but the local admissions). Takes, and TakeAlls (as
// limitkit-rls decides) for the emptied Redis. The control turns the holds
// off: the restarted Redis hands the spent key its limit again.
func TestEmptiedRedisHoldsWhatWasCounted(t *testing.T) {
	defer fallback.SetSkipHolds(false)() // holds are off by default (hold.go)
	for _, cl := range itClients {       // not parallel: the control sets a package variable
		t.Run(cl.name, func(t *testing.T) {
			for _, all := range []bool{false, true} {
				got := emptiedRedis(t, cl, true, all)
				t.Logf("FIGURE %s restarted empty (TakeAll %v): admitted in the window spent=%d twenty=%d (limit 50)", cl.name, all, got[0], got[1])
				require.LessOrEqual(t, got[0], int64(50), "the spent key past its limit after Redis came back empty")
				require.LessOrEqual(t, got[1], int64(50), "the twenty key past its limit after Redis came back empty")
			}

			got := emptiedRedis(t, cl, false, false)
			t.Logf("FIGURE %s resumed: admitted in the window spent=%d twenty=%d", cl.name, got[0], got[1])
			require.LessOrEqual(t, got[0], int64(50))
			require.LessOrEqual(t, got[1], int64(50))
			require.GreaterOrEqual(t, got[1], int64(40), "the hold refused what a Redis that kept its counts had left")

			restore := fallback.SetSkipHolds(true)
			defer restore()
			for _, all := range []bool{false, true} {
				got = emptiedRedis(t, cl, true, all)
				t.Logf("FIGURE %s control without holds, restarted empty (TakeAll %v): spent=%d twenty=%d", cl.name, all, got[0], got[1])
				require.Greater(t, got[0], int64(50), "control: without holds the spent key stayed within its limit; the test cannot tell")
			}
		})
	}
}

// emptiedRedis runs the scenario on a new redis-server and returns what
// the spent and the twenty key admitted in the window; all takes each key
// in a TakeAll beside a key of a limit no call reaches.
func emptiedRedis(t *testing.T, cl itClient, restart, all bool) [2]int64 {
	t.Helper()
	srv := redistest.Start(t)
	conn := cl.single(t, srv.Addr())
	fb, err := fallback.New(conn.store, fallback.WithTimeout(250*time.Millisecond), fallback.WithFailureThreshold(3),
		fallback.WithOpenTimeout(200*time.Millisecond), fallback.WithLogger(quietLogger()))
	require.NoError(t, err)
	clk := newBlipClock()
	rule := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 50, Window: time.Hour}
	prefix := "emptied:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	// other, first asked after the outage, probes the breaker: a held
	// key's refusals do not reach Redis.
	keys := [3]backend.Key{{Prefix: prefix, ID: "spent"}, {Prefix: prefix, ID: "twenty"}, {Prefix: prefix, ID: "other"}}
	var admitted [3]int64
	wide := backend.Request{Key: backend.Key{Prefix: prefix, ID: "wide"}, Rule: algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 1 << 30, Window: time.Hour}, Cost: 1}
	take := func(k int) {
		req := backend.Request{Key: keys[k], Rule: rule, Now: clk.now(), Cost: 1}
		var res backend.Result
		var err error
		if all {
			wide.Now = req.Now
			res, err = fb.TakeAll(context.Background(), []backend.Request{wide, req})
		} else {
			res, err = fb.Take(context.Background(), req)
		}
		require.NoError(t, err)
		if res.Allowed {
			admitted[k]++
		}
	}
	for k, n := range [2]int64{50, 30} {
		for i := 0; i < 200 && admitted[k] < n; i++ {
			take(k)
		}
		require.Equal(t, n, admitted[k], "setup")
	}
	srv.Pause()
	stalled := time.Now()
	opened := false
	for i := 0; i < 5000 && (time.Since(stalled) < time.Second || !opened); i++ {
		take(i % 2)
		opened = opened || fb.State() == backend.BreakerOpen
		time.Sleep(time.Millisecond)
	}
	require.True(t, opened, "the breaker did not open in 5000 calls")
	if restart {
		srv.Restart()
	} else {
		srv.Resume()
	}
	// Until the breaker closed and 200 calls after it.
	after := 0
	for i := 0; i < 40000 && after < 200 && time.Since(stalled) < time.Minute; i++ {
		take(i % 3)
		if fb.State() == backend.BreakerClosed {
			after++
		}
		time.Sleep(time.Millisecond)
	}
	require.Equal(t, 200, after, "the breaker did not close again: %+v", fb.Stats())
	return [2]int64{admitted[0], admitted[1]}
}

// heldCase is a baselineCase whose breaker closes again at once.
func heldCase(t *testing.T) *baselineCase {
	return newBaselineCase(t, algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 50, Window: time.Hour},
		fallback.WithOpenTimeout(time.Millisecond), fallback.WithFailureThreshold(1), fallback.WithProbes(1))
}

// recover makes the primary answer and waits for the breaker to close.
func (c *baselineCase) recover(id string) {
	c.t.Helper()
	c.p.mode.Store(healthy)
	waitUntilFor(c.t, time.Second, "the breaker closes", func() bool {
		_, err := c.s.Peek(context.Background(), c.req(id, backend.LocalPolicy(1)))
		return err == nil && c.s.State() == backend.BreakerClosed
	})
}

// TestHeldKeyOfAnEmptiedPrimary: a key the primary reported spent, an
// outage, then the primary answers again without its count (its state
// reset under the store, as a Redis restarted empty): the key stays
// refused until its window ends, by answers that are not degraded. The
// control without holds admits the limit again.
func TestHeldKeyOfAnEmptiedPrimary(t *testing.T) {
	defer fallback.SetSkipHolds(false)() // holds are off by default (hold.go)
	for _, control := range []bool{false, true} {
		c := heldCase(t)
		local := backend.LocalPolicy(1)
		require.Equal(t, 50, c.takeN("k", local, 51, false))
		c.p.mode.Store(failing)
		require.Zero(t, c.takeN("k", local, 10, true))
		c.recover("k")
		require.NoError(t, c.p.Store.Reset(context.Background(), c.req("k", local).Key, c.rule, c.at))
		if control {
			restore := fallback.SetSkipHolds(true)
			require.Equal(t, 50, c.takeN("k", local, 100, false), "control: the emptied primary's fresh limit")
			restore()
			continue
		}
		require.Zero(t, c.takeN("k", local, 100, false), "the emptied primary handed the spent key a fresh limit")
		c.at = c.at.Add(time.Hour) // the next window: the hold is over
		require.Equal(t, 50, c.takeN("k", local, 100, false))
	}
}

// TestHeldAnswerLearnsFromThePrimary: while a key is held, a lower answer
// of the primary (other processes took from it) lowers the hold, so that
// a second outage admits at most what the primary last said was left less
// what the policy admitted: 20 left, 5 admitted locally, 10 taken by
// another process, then the second outage admits 5 (45 + 5 = 50); the
// control, without the lowering, 15.
func TestHeldAnswerLearnsFromThePrimary(t *testing.T) {
	requireWithControl(t, secondOutage, 5, fallback.SetSkipLower, 15, "a hold that ignores the primary's lower answer")
}

// heldAfterAnOutage returns a heldCase whose key "k" had 30 taken, an
// outage that admitted 5 under local, and the primary back: the start of
// the second-outage scenarios.
func heldAfterAnOutage(t *testing.T) (*baselineCase, backend.FailurePolicy) {
	c := heldCase(t)
	local := backend.LocalPolicy(1)
	require.Equal(t, 30, c.takeN("k", local, 30, false))
	c.p.mode.Store(failing)
	require.Equal(t, 5, c.takeN("k", local, 5, true))
	c.recover("k")
	return c, local
}

// secondOutage runs TestHeldAnswerLearnsFromThePrimary's scenario and
// returns what the second outage admitted.
func secondOutage(t *testing.T) int {
	c, local := heldAfterAnOutage(t)
	for range 10 { // another process
		res, err := c.p.Store.Take(context.Background(), c.req("k", local))
		require.NoError(t, err)
		require.True(t, res.Allowed)
	}
	_, err := c.s.Peek(context.Background(), c.req("k", local))
	require.NoError(t, err)
	c.p.mode.Store(failing)
	return c.takeN("k", local, 50, true)
}

// TestHoldEndsOnTheNewestAnswer: a hold ends at its own reset, and the
// key is then bound by the primary's newest answer, not by none. A
// sliding log of 10 a minute: 4 taken at t0 (6 left until t0+60s), an
// outage, the primary back at t0+30s admits 4 more through the hold (it
// says 2 left until t0+90s), a second outage at t0+61s: the newest answer
// binds, 2 admitted. The control, which keeps no newer answer during the
// hold, decides the key on the local store alone past t0+60s: 10, while
// the primary counts 4 in the window (the blip model's finding: issue 43,
// item 6).
func TestHoldEndsOnTheNewestAnswer(t *testing.T) {
	requireWithControl(t, holdThenSecondOutage, 2, fallback.SetSkipNext, 10, "a hold that forgets the newest answer")
}

// holdThenSecondOutage runs TestHoldEndsOnTheNewestAnswer's scenario and
// returns what the second outage admitted.
func holdThenSecondOutage(t *testing.T) int {
	c := newBaselineCase(t, algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 10, Window: time.Minute},
		fallback.WithOpenTimeout(time.Millisecond), fallback.WithFailureThreshold(1), fallback.WithProbes(1))
	local := backend.LocalPolicy(1)
	t0 := c.at
	require.Equal(t, 4, c.takeN("k", local, 4, false))
	c.p.mode.Store(failing)
	_, err := c.s.Peek(context.Background(), c.req("k", local)) // the outage: the answer is held
	require.NoError(t, err)
	c.at = t0.Add(30 * time.Second)
	c.recover("k")
	require.Equal(t, 4, c.takeN("k", local, 4, false))
	c.p.mode.Store(failing)
	c.at = t0.Add(61 * time.Second)
	return c.takeN("k", local, 20, true)
}

// TestGiveBackKeepsWhatThePrimaryAdmitted: a GiveBack during an outage
// takes off a hold neither the units the primary admitted under it (it
// still counts them) nor those its last answer told were gone. Fixed
// window of 50: 30 taken (20 left), an outage admits 5, the primary back
// admits 10 through the hold (its last answer: 5 left, the hold's), a
// second outage gives back 15 and then admits 5, what the caller was last
// told was left. The control, whose credit takes off all 15, admits 20:
// 65 in the window where the primary alone counts 40.
func TestGiveBackKeepsWhatThePrimaryAdmitted(t *testing.T) {
	requireWithControl(t, giveBackThenTake, 5, fallback.SetSkipKeepVia, 20, "a credit that takes off what the primary admitted")
}

// requireWithControl requires, with holds on, that scenario admits want,
// and with the control skip on (what it turns off is what the test is
// for) that it admits control.
func requireWithControl(t *testing.T, scenario func(*testing.T) int, want int, skip func(bool) (restore func()), control int, what string) {
	t.Helper()
	defer fallback.SetSkipHolds(false)() // holds are off by default (hold.go)
	require.Equal(t, want, scenario(t), "with the fix")
	defer skip(true)()
	require.Equal(t, control, scenario(t), "control: "+what)
}

// giveBackThenTake runs TestGiveBackKeepsWhatThePrimaryAdmitted's
// scenario and returns what the second outage admitted after its GiveBack.
func giveBackThenTake(t *testing.T) int {
	c, local := heldAfterAnOutage(t)
	require.Equal(t, 10, c.takeN("k", local, 10, false))
	c.p.mode.Store(failing)
	back := c.req("k", local)
	back.Cost = 15
	res, err := c.s.GiveBack(context.Background(), back)
	require.NoError(t, err)
	require.True(t, res.Degraded)
	return c.takeN("k", local, 50, true)
}
