package rls

import (
	"context"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/clock"
)

// epoch is a test start aligned to every unit but week (a UTC midnight,
// a Thursday).
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// harness is a service on a store with a fake clock.
type harness struct {
	t     *testing.T
	svc   *Service
	store backend.Store
	clk   *clock.Fake
	mu    sync.Mutex
	stats []Stat
}

func mustRules(t testing.TB, yaml string) *Rules {
	t.Helper()
	r, err := NewRules(File{Name: "config.yaml", Data: []byte(yaml)})
	if err != nil {
		t.Fatalf("NewRules: %v", err)
	}
	return r
}

func memStore(t testing.TB) backend.Store {
	t.Helper()
	s, err := memorystore.New()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newHarness(t *testing.T, store backend.Store, yaml string, opts ...Option) *harness {
	t.Helper()
	h := &harness{t: t, store: store, clk: clock.NewFake(epoch)}
	opts = append([]Option{WithClock(h.clk), WithStats(h.record)}, opts...)
	svc, err := New(store, mustRules(t, yaml), opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.svc = svc
	return h
}

func (h *harness) record(s Stat) {
	h.mu.Lock()
	h.stats = append(h.stats, s)
	h.mu.Unlock()
}

func (h *harness) takeStats() []Stat {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.stats
	h.stats = nil
	return out
}

// call sends req and fails the test on a gRPC error.
func (h *harness) call(req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	h.t.Helper()
	resp, err := h.svc.ShouldRateLimit(context.Background(), req)
	if err != nil {
		h.t.Fatalf("ShouldRateLimit: %v", err)
	}
	if len(resp.GetStatuses()) != len(req.GetDescriptors()) {
		h.t.Fatalf("%d statuses for %d descriptors", len(resp.GetStatuses()), len(req.GetDescriptors()))
	}
	return resp
}

// request builds a request of the domain; hits is the request-level
// hits_addend (Envoy sends 0).
func request(domain string, hits uint32, descs ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits, Descriptors: descs}
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// withHits sets a descriptor's own hits_addend.
func withHits(d *ratelimitv3.RateLimitDescriptor, n uint64) *ratelimitv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

// expect checks a status's code, remaining and duration_until_reset
// (negative: not checked).
func expect(t *testing.T, what string, st *rlsv3.RateLimitResponse_DescriptorStatus, code rlsv3.RateLimitResponse_Code, remaining uint32, reset time.Duration) {
	t.Helper()
	if st.GetCode() != code || st.GetLimitRemaining() != remaining {
		t.Errorf("%s: code %v remaining %d; want %v remaining %d", what, st.GetCode(), st.GetLimitRemaining(), code, remaining)
	}
	if reset >= 0 {
		if got := st.GetDurationUntilReset().AsDuration(); got != reset {
			t.Errorf("%s: duration_until_reset %v; want %v", what, got, reset)
		}
	}
}
