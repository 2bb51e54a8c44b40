package rls

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/limitkit/limitkit/backend"
)

// exactRecorder records the ExactKey of every request a store is given.
type exactRecorder struct {
	backend.Store
	mu   sync.Mutex
	keys []string
}

func (r *exactRecorder) note(reqs ...backend.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, q := range reqs {
		name := ""
		if q.Exact.Base != "" {
			name = q.Exact.Name(q.Now.UnixMilli(), q.Rule.Window)
		}
		r.keys = append(r.keys, name)
	}
}

func (r *exactRecorder) Take(ctx context.Context, req backend.Request) (backend.Result, error) {
	r.note(req)
	return r.Store.Take(ctx, req)
}

func (r *exactRecorder) TakeAll(ctx context.Context, reqs []backend.Request) (backend.Result, error) {
	r.note(reqs...)
	return r.Store.TakeAll(ctx, reqs)
}

// The keys a fixed window counts in are the reference's
// (src/limiter/cache_key.go): a shared wildcard (share_threshold) names
// its pattern in place of the request's value, so that every matching
// value counts on one key in both binaries.
func TestReferenceKeyNames(t *testing.T) {
	const yaml = `domain: files
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
`
	rec := &exactRecorder{Store: memStore(t)}
	h := newHarness(t, rec, yaml, WithKeyPrefix("pfx_"))
	h.call(request("files", 0, desc("files", "files/a.pdf")))
	h.call(request("files", 0, desc("user", "alice")))
	hour := epoch.Unix() / 3600 * 3600
	minute := epoch.Unix() / 60 * 60
	want := []string{
		"pfx_files_files_files/*_" + strconv.FormatInt(hour, 10),
		"pfx_files_user_alice_" + strconv.FormatInt(minute, 10),
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.keys) != len(want) {
		t.Fatalf("keys %q; want %q", rec.keys, want)
	}
	for i := range want {
		if rec.keys[i] != want[i] {
			t.Errorf("key %d = %q; want %q", i, rec.keys[i], want[i])
		}
	}
}

// A reference key longer than a store takes (values of hostile size)
// counts in limitkit's bounded key instead of failing the request.
func TestReferenceKeyTooLong(t *testing.T) {
	const yaml = `domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 1}
`
	rec := &exactRecorder{Store: memStore(t)}
	h := newHarness(t, rec, yaml)
	huge := strings.Repeat("v", backend.MaxExactKey)
	codes := []rlsv3.RateLimitResponse_Code{
		h.call(request("d", 0, desc("k", huge))).OverallCode,
		h.call(request("d", 0, desc("k", huge))).OverallCode,
	}
	if codes[0] != ok || codes[1] != over {
		t.Fatalf("codes %v; want OK then OVER_LIMIT", codes)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, k := range rec.keys {
		if k != "" {
			t.Fatalf("an exact key of %d bytes was sent", len(k))
		}
	}
}
