package modeltest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/denycache"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/backend/rueidisstore"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/fallback"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/limiter"
)

// serverTimeStacks are the stacks on stores that decide at the Redis
// server's time (WithServerTime): go-redis, rueidis, the fallback and the
// deny cache (over pub/sub) around them.
func serverTimeStacks(t *testing.T) []stack {
	redistest.Require(t)
	srv := redistest.Start(t)
	gc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = gc.Close() })
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	gs, err := goredisstore.New(gc, goredisstore.WithServerTime())
	if err != nil {
		t.Fatal(err)
	}
	rs, err := rueidisstore.New(rc, rueidisstore.WithServerTime())
	if err != nil {
		t.Fatal(err)
	}
	f, err := fallback.New(gs, fallback.WithTimeout(10*time.Second), fallback.WithPolicy(backend.FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	d, err := denycache.New(rs, rueidisstore.NewBus(rc))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return []stack{{"goredis", gs}, {"rueidis", rs}, {"fallback(goredis)", f}, {"denycache(rueidis)", d}}
}

// TestResetAtServerTime (issue 43, item 5): on a store that decides at the
// Redis server's time, a Reset frees the spent key whatever the local
// clock says: a limiter whose clock is 150 s behind (or ahead of) the
// server's spends a fixed window, resets it, and is admitted again (the
// reset deleted the windows around the local clock's time, none of them
// the server's, and the key stayed refused, 4 runs of 4). The controls:
// without skew the same run is admitted (the test sees the skew, not a
// reset that never works), and without the Reset the key stays refused
// (it sees the reset, not a key that was never spent).
func TestResetAtServerTime(t *testing.T) {
	rule := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 2, Window: time.Hour}
	for si, st := range serverTimeStacks(t) {
		t.Run(st.name, func(t *testing.T) {
			for i, skew := range []time.Duration{-150 * time.Second, 150 * time.Second, 0} {
				prefix := fmt.Sprintf("srvreset:%d:%d:%d:", time.Now().UnixNano(), si, i)
				l, err := limiter.New(st.store, limiter.Config{Algorithm: rule.Algorithm, Limit: rule.Limit, Window: rule.Window, Prefix: prefix},
					limiter.WithClock(clock.NewFake(time.Now().Add(skew))))
				if err != nil {
					t.Fatal(err)
				}
				if got := spendAndReset(t, l, "k", true); got != 1 {
					t.Errorf("skew %v: %d admitted after the Reset, want 1 (the reset missed the server's window)", skew, got)
				}
				if got := spendAndReset(t, l, "control", false); got != 0 {
					t.Errorf("skew %v, control without a Reset: %d admitted, want 0", skew, got)
				}
			}
		})
	}
}

// spendAndReset spends key's limit of 2, resets it when reset says so, and
// returns how many of 1 more request are admitted.
func spendAndReset(t *testing.T, l *limiter.Limiter, key string, reset bool) int {
	t.Helper()
	ctx := context.Background()
	for range 3 {
		if _, err := l.Allow(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	if reset {
		if err := l.Reset(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	d, err := l.Allow(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if d.Degraded {
		t.Fatal("degraded: the stack did not reach its store")
	}
	if d.Allowed {
		return 1
	}
	return 0
}
