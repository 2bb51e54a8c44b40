package storetest_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/storetest"
	"github.com/stretchr/testify/require"
)

func newMemory(t *testing.T) *memorystore.Store {
	s, err := memorystore.New()
	require.NoError(t, err)
	return s
}

// wrapped is a store that bends its requests or results on the way through.
type wrapped struct {
	backend.Store
	req  func(*backend.Request)
	res  func(*backend.Result)
	peek func(ctx context.Context, req backend.Request) (backend.Result, error)
	all  func([]backend.Result) []backend.Result // bends what a TakeEach hands back
}

func (w wrapped) TakeEach(ctx context.Context, reqs []backend.Request) (backend.Result, []backend.Result, error) {
	res, each, err := backend.TakeEach(ctx, w.Store, reqs)
	if w.all != nil && each != nil {
		each = w.all(each)
	}
	return res, each, err
}

func (w wrapped) Take(ctx context.Context, req backend.Request) (backend.Result, error) {
	if w.req != nil {
		w.req(&req)
	}
	res, err := w.Store.Take(ctx, req)
	if w.res != nil {
		w.res(&res)
	}
	return res, err
}

func (w wrapped) Peek(ctx context.Context, req backend.Request) (backend.Result, error) {
	if w.peek != nil {
		return w.peek(ctx, req)
	}
	if w.req != nil {
		w.req(&req)
	}
	res, err := w.Store.Peek(ctx, req)
	if w.res != nil {
		w.res(&res)
	}
	return res, err
}

// racy decides like the three-command Redis limiter: it reads the state,
// decides on a copy without holding the key, then writes the copy back.
type racy struct {
	mu     sync.Mutex
	states map[backend.Key]algorithms.State
}

func (r *racy) Take(_ context.Context, req backend.Request) (backend.Result, error) {
	if err := req.Validate(); err != nil {
		return backend.Result{}, err
	}
	r.mu.Lock()
	st := r.states[req.Key]
	st = st.Clone()
	r.mu.Unlock()
	time.Sleep(10 * time.Microsecond) // the round trips between the commands
	var out algorithms.Outcome
	if req.Charge { // as a store must: a charge past the limit is no Take
		out = req.Rule.Charge(&st, req.Millis(), req.Cost, true)
	} else {
		out = req.Rule.Take(&st, req.Millis(), req.Cost)
	}
	r.mu.Lock()
	r.states[req.Key] = st
	r.mu.Unlock()
	return backend.ResultOf(req.Rule, out), nil
}

// TakeAll takes each request in turn with no refunds: a later denial
// leaves the earlier units taken.
func (r *racy) TakeAll(ctx context.Context, reqs []backend.Request) (backend.Result, error) {
	if err := backend.ValidateAll(reqs); err != nil {
		return backend.Result{}, err
	}
	results := make([]backend.Result, len(reqs))
	for i, req := range reqs {
		res, err := r.Take(ctx, req)
		if err != nil {
			return backend.Result{}, err
		}
		results[i] = res
	}
	return backend.Combine(results), nil
}

func (r *racy) Peek(_ context.Context, req backend.Request) (backend.Result, error) {
	if err := req.Validate(); err != nil {
		return backend.Result{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.states[req.Key]
	return backend.ResultOf(req.Rule, req.Rule.Peek(&st, req.Millis(), req.Cost)), nil
}

func (r *racy) Reset(_ context.Context, key backend.Key, _ algorithms.Rule, _ time.Time) error {
	if err := key.Validate(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.states, key)
	return nil
}

// badLeases is a memory store whose Release or Renew is wrong.
type badLeases struct {
	*memorystore.Store
	release func(s *memorystore.Store, ctx context.Context, req backend.Request, lease int64) (bool, error)
	renew   func(s *memorystore.Store, ctx context.Context, req backend.Request, lease int64) (backend.Result, error)
}

func (b badLeases) Release(ctx context.Context, req backend.Request, lease int64) (bool, error) {
	if b.release != nil {
		return b.release(b.Store, ctx, req, lease)
	}
	return b.Store.Release(ctx, req, lease)
}

func (b badLeases) Renew(ctx context.Context, req backend.Request, lease int64) (backend.Result, error) {
	if b.renew != nil {
		return b.renew(b.Store, ctx, req, lease)
	}
	return b.Store.Renew(ctx, req, lease)
}

// badGiveBack is a memory store whose GiveBack is wrong.
type badGiveBack struct {
	*memorystore.Store
	give func(s *memorystore.Store, ctx context.Context, req backend.Request) (backend.Result, error)
}

func (b badGiveBack) GiveBack(ctx context.Context, req backend.Request) (backend.Result, error) {
	return b.give(b.Store, ctx, req)
}

// TestBrokenGiveBackFails shows the give_back cases catch stores that give
// back wrong.
func TestBrokenGiveBackFails(t *testing.T) {
	broken := map[string]struct {
		give     func(s *memorystore.Store, ctx context.Context, req backend.Request) (backend.Result, error)
		wantCase string
	}{
		"gives back twice": {func(s *memorystore.Store, ctx context.Context, req backend.Request) (backend.Result, error) {
			_, _ = s.GiveBack(ctx, req)
			return s.GiveBack(ctx, req)
		}, "give_back/same_as_go_engine"},
		"gives back nothing": {func(s *memorystore.Store, ctx context.Context, req backend.Request) (backend.Result, error) {
			return s.Peek(ctx, req)
		}, "give_back/same_as_go_engine"},
		"refuses nothing": {func(s *memorystore.Store, ctx context.Context, req backend.Request) (backend.Result, error) {
			return s.Peek(ctx, req)
		}, "give_back/refused"},
	}
	for name, b := range broken {
		t.Run(name, func(t *testing.T) {
			failed := map[string]bool{}
			for _, f := range storetest.Check(t.Context(), badGiveBack{Store: newMemory(t), give: b.give}) {
				failed[f.Case] = true
			}
			require.True(t, failed[b.wantCase], "case %s did not catch it; failed: %v", b.wantCase, failed)
		})
	}
}

// TestBrokenLeaseStoresFail shows the lease cases catch stores that get a
// lease's life wrong.
func TestBrokenLeaseStoresFail(t *testing.T) {
	broken := map[string]struct {
		store     backend.Store
		wantCases []string
	}{
		"no LeaseStore": {wrapped{Store: newMemory(t)}, []string{"lease/life", "lease/renew", "table/concurrency"}},
		"release frees nothing": {badLeases{Store: newMemory(t), release: func(*memorystore.Store, context.Context, backend.Request, int64) (bool, error) {
			return true, nil
		}}, []string{"lease/life", "lease/unique_ids", "table/concurrency"}},
		"release ignores expiry": {badLeases{Store: newMemory(t), release: func(s *memorystore.Store, ctx context.Context, req backend.Request, lease int64) (bool, error) {
			req.Now = time.UnixMilli(lease)
			return s.Release(ctx, req, lease)
		}}, []string{"lease/expiry", "table/concurrency", "same_as_go_engine/concurrency"}},
		"renew takes a new lease": {badLeases{Store: newMemory(t), renew: func(s *memorystore.Store, ctx context.Context, req backend.Request, lease int64) (backend.Result, error) {
			return s.Take(ctx, req)
		}}, []string{"lease/renew", "table/concurrency"}},
	}
	for name, b := range broken {
		t.Run(name, func(t *testing.T) {
			failed := map[string]bool{}
			for _, f := range storetest.Check(t.Context(), b.store) {
				failed[f.Case] = true
			}
			for _, c := range b.wantCases {
				require.True(t, failed[c], "case %s did not catch it; failed: %v", c, failed)
			}
		})
	}
}

func TestMemoryStorePasses(t *testing.T) {
	require.Empty(t, storetest.Check(t.Context(), newMemory(t)))
}

// TestBrokenStoresFail shows the suite catches each kind of broken store, and
// in the case that should catch it.
func TestBrokenStoresFail(t *testing.T) {
	broken := map[string]struct {
		store     func(t *testing.T) backend.Store
		wantCases []string
	}{
		"entry at now-window still counted": {
			func(t *testing.T) backend.Store {
				return wrapped{Store: newMemory(t), req: func(r *backend.Request) { r.Rule.Window += time.Millisecond }}
			},
			[]string{"table/sliding_log", "table/fixed_window", "table/sliding_counter"},
		},
		"clock read by the store": {
			func(t *testing.T) backend.Store {
				return wrapped{Store: newMemory(t), req: func(r *backend.Request) { r.Now = time.Now() }}
			},
			[]string{"table/sliding_log", "expiry/sliding_log", "clock_forward/fixed_window"},
		},
		"cost ignored": {
			func(t *testing.T) backend.Store {
				return wrapped{Store: newMemory(t), req: func(r *backend.Request) { r.Cost = 1 }}
			},
			[]string{"cost/sliding_log", "cost/fixed_window", "cost/sliding_counter"},
		},
		"retry-after rounded to seconds": {
			func(t *testing.T) backend.Store {
				return wrapped{Store: newMemory(t), res: func(r *backend.Result) { r.RetryAfter = r.RetryAfter.Round(time.Second) }}
			},
			[]string{"table/sliding_log", "table/sliding_counter"},
		},
		"prefix ignored": {
			func(t *testing.T) backend.Store {
				return wrapped{Store: newMemory(t), req: func(r *backend.Request) { r.Key.Prefix = "shared:" }}
			},
			[]string{"independent_keys/sliding_log"},
		},
		"ids truncated to 64 bytes": {
			func(t *testing.T) backend.Store {
				return wrapped{Store: newMemory(t), req: func(r *backend.Request) { r.Key.ID = r.Key.ID[:min(len(r.Key.ID), 64)] }}
			},
			[]string{"hostile_ids/sliding_log", "hostile_ids/fixed_window"},
		},
		"peek consumes": {
			func(t *testing.T) backend.Store {
				m := newMemory(t)
				return wrapped{Store: m, peek: m.Take}
			},
			[]string{"peek/sliding_log", "peek/fixed_window", "peek/sliding_counter"},
		},
		"clock going back reopens the window": {
			func(t *testing.T) backend.Store {
				m := newMemory(t)
				last := map[backend.Key]time.Time{}
				var mu sync.Mutex
				return wrapped{Store: m, req: func(r *backend.Request) {
					mu.Lock()
					defer mu.Unlock()
					if prev, ok := last[r.Key]; ok && r.Now.Before(prev) {
						_ = m.Reset(context.Background(), r.Key, r.Rule, time.Now())
					}
					last[r.Key] = r.Now
				}}
			},
			[]string{"clock_back/sliding_log", "clock_back/fixed_window", "clock_back/sliding_counter"},
		},
		"TakeAll without Each": {
			func(t *testing.T) backend.Store {
				return wrapped{Store: newMemory(t), all: func([]backend.Result) []backend.Result { return nil }}
			},
			[]string{"take_all/each"},
		},
		"Each in reverse order": {
			func(t *testing.T) backend.Store {
				return wrapped{Store: newMemory(t), all: func(each []backend.Result) []backend.Result { slices.Reverse(each); return each }}
			},
			[]string{"take_all/each"},
		},
		"Each filled with the combined result": {
			func(t *testing.T) backend.Store {
				return wrapped{Store: newMemory(t), all: func(each []backend.Result) []backend.Result {
					combined := backend.Combine(each)
					combined.Rule = 0
					for i := range each {
						each[i] = combined
					}
					return each
				}}
			},
			[]string{"take_all/each"},
		},
		"read-decide-write without atomicity": {
			func(t *testing.T) backend.Store { return &racy{states: map[backend.Key]algorithms.State{}} },
			[]string{"concurrency/sliding_log", "concurrency/fixed_window", "concurrency/sliding_counter",
				"take_all/guard", "take_all/same_as_go_engine", "take_all/concurrency"},
		},
	}
	for name, b := range broken {
		t.Run(name, func(t *testing.T) {
			failures := storetest.Check(t.Context(), b.store(t))
			require.NotEmpty(t, failures)
			failed := map[string]bool{}
			for _, f := range failures {
				failed[f.Case] = true
				require.NotEmpty(t, strings.TrimSpace(f.Message))
			}
			for _, c := range b.wantCases {
				require.True(t, failed[c], "case %s did not catch it; failed: %v", c, failed)
			}
		})
	}
}
