package rls

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/limitkit/limitkit/backend"
)

// countingStore counts the calls that reach its store.
type countingStore struct {
	backend.Store
	calls atomic.Int64
}

func (c *countingStore) Take(ctx context.Context, r backend.Request) (backend.Result, error) {
	c.calls.Add(1)
	return c.Store.Take(ctx, r)
}

func (c *countingStore) Peek(ctx context.Context, r backend.Request) (backend.Result, error) {
	c.calls.Add(1)
	return c.Store.Peek(ctx, r)
}

func (c *countingStore) TakeAll(ctx context.Context, rs []backend.Request) (backend.Result, error) {
	c.calls.Add(1)
	return c.Store.TakeAll(ctx, rs)
}

// TakeEach counts one call too: it is the TakeAll the service sends.
func (c *countingStore) TakeEach(ctx context.Context, rs []backend.Request) (backend.Result, []backend.Result, error) {
	c.calls.Add(1)
	return backend.TakeEach(ctx, c.Store, rs)
}

const fanOutYAML = `
domain: f
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 10}
`

// TestFanOutBounded: a request of many checks (hits_addend 0), negative
// hits or shadow limits, each a store call of its own, is refused before
// any store call past MaxSeparateCalls, and one of many descriptors past
// MaxDescriptors; at the bound it is answered (the control: the counting
// sees every call).
func TestFanOutBounded(t *testing.T) {
	store := &countingStore{Store: memStore(t)}
	h := newHarness(t, store, fanOutYAML)
	many := func(n int, mk func(i int) *ratelimitv3.RateLimitDescriptor) []*ratelimitv3.RateLimitDescriptor {
		out := make([]*ratelimitv3.RateLimitDescriptor, n)
		for i := range out {
			out[i] = mk(i)
		}
		return out
	}
	check := func(i int) *ratelimitv3.RateLimitDescriptor { return withHits(desc("user", fmt.Sprint(i)), 0) }
	cases := []struct {
		name  string
		descs []*ratelimitv3.RateLimitDescriptor
		want  string
	}{
		{"100k checks", many(100_000, check), "the request has 100000 descriptors; at most 256"},
		{"65 checks", many(MaxSeparateCalls+1, check), "the request has 65 checks (hits_addend 0), negative hits and shadow limits; at most 64"},
		{"65 negative hits", many(MaxSeparateCalls+1, func(i int) *ratelimitv3.RateLimitDescriptor { return negative(desc("user", fmt.Sprint(i)), 1) }), "at most 64"},
		{"65 shadow limits", many(MaxSeparateCalls+1, func(i int) *ratelimitv3.RateLimitDescriptor { return desc("shadow", fmt.Sprint(i)) }), "at most 64"},
		{"17 enforced", many(backend.MaxRequests+1, func(i int) *ratelimitv3.RateLimitDescriptor { return desc("user", fmt.Sprint(i)) }), "17 limits to check; at most 16"},
	}
	for _, c := range cases {
		_, err := h.svc.ShouldRateLimit(context.Background(), request("f", 0, c.descs...))
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want InvalidArgument saying %q", c.name, err, c.want)
		}
		if n := store.calls.Swap(0); n != 0 {
			t.Errorf("%s: %d store calls before the refusal, want none", c.name, n)
		}
	}
	// At the bounds: answered, every call counted.
	descs := append(many(MaxSeparateCalls, check), many(backend.MaxRequests, func(i int) *ratelimitv3.RateLimitDescriptor { return desc("user", fmt.Sprint(-i-1)) })...)
	descs = append(descs, many(MaxDescriptors-len(descs), func(i int) *ratelimitv3.RateLimitDescriptor { return desc("unmatched", fmt.Sprint(i)) })...)
	h.call(request("f", 0, descs...))
	if n := store.calls.Load(); n != MaxSeparateCalls+1 {
		t.Fatalf("%d store calls at the bounds, want %d checks and one TakeAll", n, MaxSeparateCalls+1)
	}
}
