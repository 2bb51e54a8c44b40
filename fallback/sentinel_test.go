package fallback_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/fallback"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/internal/dev/scripttest"
)

// itFailoverWait bounds the waits for a failover (sentinel or cluster).
const itFailoverWait = 30 * time.Second

// TestSentinelFailover kills the master of a sentinel set under load, with
// go-redis' failover client and rueidis' sentinel client: callers see no
// errors, decisions continue degraded while no master is reachable, and once
// the sentinels have promoted the replica, decisions come from it
// (non-degraded, the breaker closed). The promoted replica never had the
// scripts (the script cache is not replicated), so it ran them with EVAL
// after answering NOSCRIPT.
func TestSentinelFailover(t *testing.T) {
	forEachClient(t, func(t *testing.T, cl itClient) {
		sn := redistest.StartSentinel(t)
		conn := cl.sentinel(t, sn)
		rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 50, Window: time.Minute}
		h := newHarness(t, conn.store, rule, 8, fallback.WithPolicy(backend.LocalPolicy(2)))
		r := h.start(1000000, 120*time.Second)

		waitForCount(t, &r.fresh, 200, "decisions from the master before the kill")
		require.Zero(t, scripttest.EvalCalls(t, sn.Replica), "the replica ran EVAL before the failover")
		killAt := time.Now()
		sn.Master.Kill()
		waitUntilFor(t, itWait, "degraded decisions after the kill", func() bool { return h.transitionsSince(backend.BreakerOpen, killAt) > 0 })

		// The breaker has seen the dead master: a sentinel fails it over at
		// once, not after down-after-milliseconds (1 s) and an election.
		sn.Failover()
		var promotedAt time.Time
		waitUntilFor(t, itFailoverWait, "the sentinels promote the replica", func() bool {
			addr, err := sn.CurrentMaster()
			if err == nil && addr == sn.Replica.Addr() {
				promotedAt = time.Now()
				return true
			}
			return false
		})
		waitUntilFor(t, itFailoverWait, "decisions from the promoted replica", func() bool {
			return h.fb.State() == backend.BreakerClosed && r.anyFreshSince(promotedAt)
		})
		freshAtClose := r.fresh.Load()
		waitForCount(t, &r.fresh, freshAtClose+100, "decisions from the promoted replica")
		ds := r.finish()

		requireNoErrors(t, ds)
		var gap, gapDegraded int
		for _, d := range ds {
			if d.start.After(killAt) && d.end.Before(promotedAt) {
				gap++
				if d.degraded {
					gapDegraded++
				}
			}
		}
		require.Positive(t, gapDegraded, "no degraded decision between the kill and the promotion")
		fresh, ok := firstSince(ds, killAt, func(d loadDecision) bool { return !d.degraded })
		require.True(t, ok, "no decision from Redis after the kill")
		require.Equal(t, backend.BreakerClosed, h.fb.State())

		role, err := sn.Replica.Do("ROLE")
		require.NoError(t, err)
		require.Contains(t, role, "master", "the replica was not promoted")
		evals := scripttest.EvalCalls(t, sn.Replica)
		require.Positive(t, evals, "the promoted replica never ran a script from its source (NOSCRIPT, then EVAL)")
		firstDegraded, ok := firstSince(ds, killAt, func(d loadDecision) bool { return d.degraded })
		require.True(t, ok)

		t.Logf("FIGURE %s sentinel: first degraded decision %v after the kill; sentinels reported the promotion %v after the kill; first decision from the promoted replica %v after the kill (%v after the promotion was seen)",
			cl.name, firstDegraded.end.Sub(killAt), promotedAt.Sub(killAt), fresh.end.Sub(killAt), fresh.end.Sub(promotedAt))
		t.Logf("%s sentinel: %d decisions between the kill and the promotion, %d degraded; %d EVAL on the promoted replica; %d decisions in all",
			cl.name, gap, gapDegraded, evals, len(ds))
	})
}
