package rls

import (
	"context"
	"fmt"
	"testing"

	"github.com/limitkit/limitkit/backend"
)

const allOrNothingYAML = `
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding_log}
`

// checkAllOrNothing sends requests of a user limit (5) and a path limit
// (2) together; the third is refused by the path, and must leave the
// user's count as two requests made it. It returns what went wrong.
func checkAllOrNothing(t *testing.T, store backend.Store) error {
	h := newHarness(t, store, allOrNothingYAML)
	both := request("d", 0, desc("user", "u"), desc("path", "/p"))
	for i := range 2 {
		if resp := h.call(both); resp.GetOverallCode() != ok {
			return fmt.Errorf("request %d refused: %v", i+1, resp)
		}
	}
	for i := range 3 {
		resp := h.call(both)
		if resp.GetOverallCode() != over {
			return fmt.Errorf("request %d admitted beyond the path's 2", i+3)
		}
		// The refusing status names the path; the user's says what it
		// holds unconsumed: 5 - 2 left, enough for this request.
		if st := resp.GetStatuses()[1]; st.GetCode() != over || st.GetLimitRemaining() != 0 {
			return fmt.Errorf("path status %v; want OVER_LIMIT, 0 left", st)
		}
		if st := resp.GetStatuses()[0]; st.GetCode() != ok || st.GetLimitRemaining() != 3 {
			return fmt.Errorf("refused request %d: user status %v; want OK with 3 left (nothing consumed)", i+1, st)
		}
	}
	// The user alone: 3 were left, 2 after this one.
	if st := h.call(request("d", 0, desc("user", "u"))).GetStatuses()[0]; st.GetLimitRemaining() != 2 {
		return fmt.Errorf("user alone after the refusals: %d left; want 2", st.GetLimitRemaining())
	}
	if s := h.takeStats(); len(s) == 0 {
		return fmt.Errorf("no stats")
	}
	return nil
}

func TestRequestIsAllOrNothing(t *testing.T) {
	if err := checkAllOrNothing(t, memStore(t)); err != nil {
		t.Fatal(err)
	}
}

// consumeOthers is the reference server's behaviour (its #1060) as a
// store: TakeAll takes each request on its own, so a refusal by one still
// consumes the others.
type consumeOthers struct{ backend.Store }

func (c consumeOthers) TakeAll(ctx context.Context, reqs []backend.Request) (backend.Result, error) {
	results := make([]backend.Result, len(reqs))
	for i, r := range reqs {
		res, err := c.Take(ctx, r)
		if err != nil {
			return backend.Result{}, err
		}
		results[i] = res
	}
	return backend.Combine(results), nil
}

// The control: the check catches a service that consumes the others.
func TestAllOrNothingCatchesConsumeTheOthers(t *testing.T) {
	err := checkAllOrNothing(t, consumeOthers{memStore(t)})
	if err == nil {
		t.Fatal("the all-or-nothing check passed on a store that consumes the other limits of a refused request")
	}
	t.Logf("caught, as it must be: %v", err)
}
