package rls

import (
	"context"
	"sync/atomic"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/limitkit/limitkit/backend"
)

// callKinds counts a store's Takes and TakeAlls.
type callKinds struct {
	backend.Store
	takes, takeAlls atomic.Int64
}

func (c *callKinds) Take(ctx context.Context, r backend.Request) (backend.Result, error) {
	c.takes.Add(1)
	return c.Store.Take(ctx, r)
}

func (c *callKinds) TakeAll(ctx context.Context, rs []backend.Request) (backend.Result, error) {
	c.takeAlls.Add(1)
	return c.Store.TakeAll(ctx, rs)
}

// TakeEach is a TakeAll that says how each limit stands, as the stores'.
func (c *callKinds) TakeEach(ctx context.Context, rs []backend.Request) (backend.Result, []backend.Result, error) {
	c.takeAlls.Add(1)
	return backend.TakeEach(ctx, c.Store, rs)
}

const chargesYAML = `
domain: tokens
descriptors:
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: b
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: c
    rate_limit: {unit: hour, requests_per_unit: 500}
`

// TestChargesGoTogether: the three charges of one request reach the store
// as one TakeAll, and each descriptor still counts its own limit (a
// check after 600 charged reads 399 left of a's 1000, 0 of c's 500). The
// control sends one charge: a Take, so the counts tell the paths apart.
func TestChargesGoTogether(t *testing.T) {
	store := &callKinds{Store: memStore(t)}
	h := newHarness(t, store, chargesYAML, WithChargedDomains("tokens"))
	for range 2 {
		resp, err := h.svc.ShouldRateLimit(context.Background(), request("tokens", 300, desc("a", "x"), desc("b", "x"), desc("c", "x")))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetStatuses()) != 3 {
			t.Fatalf("%d statuses, want 3", len(resp.GetStatuses()))
		}
	}
	if takes, alls := store.takes.Swap(0), store.takeAlls.Swap(0); takes != 0 || alls != 2 {
		t.Errorf("two requests of three charges: %d Takes and %d TakeAlls reached the store; want 0 and 2", takes, alls)
	}
	resp, err := h.svc.ShouldRateLimit(context.Background(), request("tokens", 0, desc("a", "x"), desc("c", "x")))
	if err != nil {
		t.Fatal(err)
	}
	if a, c := resp.GetStatuses()[0], resp.GetStatuses()[1]; a.GetCode() != rlsv3.RateLimitResponse_OK || a.GetLimitRemaining() != 399 || c.GetLimitRemaining() != 0 {
		t.Errorf("checks after 600 charged: a %v (%d left), c %v (%d left); want OK with 399 and 0", a.GetCode(), a.GetLimitRemaining(), c.GetCode(), c.GetLimitRemaining())
	}
	store.takes.Store(0)
	store.takeAlls.Store(0)
	if _, err := h.svc.ShouldRateLimit(context.Background(), request("tokens", 10, desc("a", "y"))); err != nil {
		t.Fatal(err)
	}
	if takes, alls := store.takes.Load(), store.takeAlls.Load(); takes != 1 || alls != 0 {
		t.Errorf("control: one charge: %d Takes and %d TakeAlls; want 1 and 0", takes, alls)
	}
}
