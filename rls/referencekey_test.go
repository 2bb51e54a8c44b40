package rls

import (
	"context"
	"strconv"
	"sync"
	"testing"

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
		r.keys = append(r.keys, q.Exact.Name(q.Now.UnixMilli(), q.Rule.Window))
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
