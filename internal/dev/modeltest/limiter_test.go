package modeltest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/limiter"
)

// rateAlgorithms are the algorithms the limiter decides with Allow (those
// that hold no leases) whose descriptor passes keep: all of them when keep
// is nil.
func rateAlgorithms(keep func(check) bool) []algorithms.Name {
	var out []algorithms.Name
	for _, a := range algorithms.Algorithms() {
		c, _ := checkOf(a)
		if !a.HoldsLeases() && (keep == nil || keep(c)) {
			out = append(out, a.Name)
		}
	}
	return out
}

// TestLimiterModel drives the limiter's own calls, Allow, AllowN, Peek,
// Reset and SetConfig, of two limiters with different configs on one
// prefix, each on its own clock (late and skewed requests), against the
// same model and invariants as TestModel, on every store and stack.
func TestLimiterModel(t *testing.T) {
	runEveryStack(t, "limmodel", rateAlgorithms(nil), 400, (*run).withLimiters)
}

// TestConcurrentSetConfig (issue 22, defect 1): 32 callers on one key while
// the limit changes between 5, 10 and 20 per hour under them admit at most
// 20 in the hour on every algorithm that promises never to exceed the
// largest limit in force (Exact and NeverOver: the logs and two_level; the
// old logs, trimmed at each lower limit, admitted up to 592). Its control
// runs the same on a log that forgets (forgettingLog) and must see more
// than 20: every round at 5 trims it to 5, and the next at 20 admits 15
// more.
func TestConcurrentSetConfig(t *testing.T) {
	logs := rateAlgorithms(check.neverOver)
	for si, st := range stacks(t) {
		t.Run(st.name, func(t *testing.T) {
			for _, alg := range logs {
				store := st.store
				if st.name == "memory" {
					store = newMemory(t)
				}
				prefix := fmt.Sprintf("setcfg:%d:%d:%s:", time.Now().UnixNano(), si, alg)
				if got := concurrentSetConfig(t, store, alg, prefix); got > 20 {
					t.Errorf("%s: %d admitted in one hour; no limit in force exceeds 20", alg, got)
				}
			}
		})
	}
	t.Run("control", func(t *testing.T) {
		got := concurrentSetConfig(t, &forgettingLog{}, algorithms.SlidingLog, "setcfg:control:")
		if got <= 20 {
			t.Fatalf("the forgetting log admitted %d, within the limit: the test cannot see defect 1", got)
		}
		t.Logf("control: the forgetting log admitted %d", got)
	})
}

// concurrentSetConfig runs 12 rounds of 32 concurrent callers of 10 Allows
// each on one key. The limit moves through 20, 5, 20, 10 per hour: each
// round starts at its limit, and halfway through it another goroutine sets
// the next round's, under the callers. It returns how many were admitted.
func concurrentSetConfig(t *testing.T, store backend.Store, alg algorithms.Name, prefix string) int64 {
	cfg := func(limit int64) limiter.Config {
		return limiter.Config{Algorithm: alg, Limit: limit, Window: time.Hour, Prefix: prefix}
	}
	limits := []int64{20, 5, 20, 10}
	l, err := limiter.New(store, cfg(limits[0]))
	if err != nil {
		t.Fatal(err)
	}
	const callers, calls = 32, 10
	var admitted atomic.Int64
	for round := range 12 {
		if err := l.SetConfig(cfg(limits[round%len(limits)])); err != nil {
			t.Fatal(err)
		}
		var made atomic.Int64
		half := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-half
			if err := l.SetConfig(cfg(limits[(round+1)%len(limits)])); err != nil {
				t.Error(err)
			}
		}()
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range calls {
					d, err := l.Allow(context.Background(), "k")
					if made.Add(1) == callers*calls/2 {
						close(half)
					}
					if err != nil {
						t.Error(err)
						continue
					}
					if d.Allowed {
						admitted.Add(1)
					}
				}
			}()
		}
		wg.Wait()
	}
	return admitted.Load()
}
