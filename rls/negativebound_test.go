package rls

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// spentThenRefunded spends key1's 50 per second, sends is_negative_hits of
// 2^64-1, and returns how many of 200 one-hit requests are admitted after
// it: at most 50, the units consumed, when a refund never takes a count
// below what was consumed.
func spentThenRefunded(t *testing.T, store backend.Store) int {
	h := newHarness(t, store, basicYAML)
	for range 50 {
		h.call(request("basic", 0, desc("key1", "value1")))
	}
	d := withHits(desc("key1", "value1"), math.MaxUint64)
	d.IsNegativeHits = true
	h.call(request("basic", 0, d))
	n := 0
	for range 200 {
		if h.call(request("basic", 0, desc("key1", "value1"))).GetOverallCode() == ok {
			n++
		}
	}
	return n
}

// TestNegativeHitsNeverBelowConsumed: a refund of 2^64-1 hits on a spent
// key frees what was consumed and no more, on memory and Redis (both
// clients). The control is a store whose give back has no floor, on which
// the same sequence admits far more.
func TestNegativeHitsNeverBelowConsumed(t *testing.T) {
	if n := spentThenRefunded(t, memStore(t)); n != 50 {
		t.Errorf("memory: %d admitted after the refund, want 50", n)
	}
	srv := redistest.Start(t)
	for _, c := range redisClients {
		if _, err := srv.Do("FLUSHALL"); err != nil {
			t.Fatal(err)
		}
		if n := spentThenRefunded(t, c.make(t, []string{srv.Addr()}, false)); n != 50 {
			t.Errorf("redis %s: %d admitted after the refund, want 50", c.name, n)
		}
	}
	if n := spentThenRefunded(t, &floorless{Store: memStore(t)}); n <= 50 {
		t.Errorf("control: a store without a floor admitted %d; the test cannot tell", n)
	}
}

// floorless is the defect as a store: its give back takes the count below
// zero (credit), by remembering it and admitting that many more.
type floorless struct {
	backend.Store
	credit int64
}

func (f *floorless) GiveBack(ctx context.Context, req backend.Request) (backend.Result, error) {
	f.credit += req.Cost
	if err := f.Store.Reset(ctx, req.Key, req.Rule, time.Now()); err != nil {
		return backend.Result{}, err
	}
	return f.Store.Peek(ctx, req)
}

func (f *floorless) TakeAll(ctx context.Context, reqs []backend.Request) (backend.Result, error) {
	if f.credit > 0 {
		f.credit--
		return backend.Result{Allowed: true, Limit: reqs[0].Rule.Limit, Remaining: 0}, nil
	}
	return f.Store.TakeAll(ctx, reqs)
}

func (f *floorless) Take(ctx context.Context, req backend.Request) (backend.Result, error) {
	return f.TakeAll(ctx, []backend.Request{req})
}
