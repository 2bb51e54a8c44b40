package rls

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/fallback"
)

// The duration a refused status reports is the algorithm's own retry
// time, rounded up to a second, for every rate algorithm: a second store
// given the same requests directly says what it must be.
func TestDurationUntilResetIsTheAlgorithmsRetry(t *testing.T) {
	checkRetries(t, func() backend.Store { return memStore(t) })
}

// checkRetries runs the retry-time cases on stores made by mk, a fresh
// state each.
func checkRetries(t *testing.T, mk func() backend.Store) {
	for _, name := range algorithms.Names() {
		if name == algorithms.Concurrency {
			continue
		}
		t.Run(string(name), func(t *testing.T) {
			h := newHarness(t, mk(), fmt.Sprintf(`
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 4, algorithm: %s}
`, name))
			direct := memStore(t)
			rule := algorithms.Rule{Algorithm: name, Limit: 4, Window: time.Minute}
			ctx := context.Background()
			// Requests at 10 s, 11 s, 12 s, 13 s; the fifth at 13.5 s.
			var res backend.Result
			for i, at := range []time.Duration{10 * time.Second, 11 * time.Second, 12 * time.Second, 13 * time.Second, 13500 * time.Millisecond} {
				h.clk.Set(epoch.Add(at))
				st := h.call(request("d", 0, desc("k", "v"))).GetStatuses()[0]
				var err error
				res, err = direct.Take(ctx, backend.Request{Key: backend.Key{ID: "x"}, Rule: rule, Now: epoch.Add(at), Cost: 1})
				if err != nil {
					t.Fatal(err)
				}
				want, code := res.ResetAfter, ok
				if !res.Allowed {
					want, code = res.RetryAfter, over
				}
				expect(t, fmt.Sprintf("request %d", i+1), st, code, uint32(res.Remaining), ceilSecond(want))
			}
			if res.Allowed {
				t.Fatalf("the fifth request was admitted; the case does not test a refusal")
			}
		})
	}
	// The sliding log is not the window's end: the first request slides
	// out at 70 s, 28.5 s after 41.5 s, where a fixed window ends at 60 s.
	h := newHarness(t, mk(), `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 4, algorithm: sliding_log}
`)
	for _, at := range []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second, 40 * time.Second, 41500 * time.Millisecond} {
		h.clk.Set(epoch.Add(at))
		h.call(request("d", 0, desc("k", "v")))
	}
	h.clk.Set(epoch.Add(41500 * time.Millisecond))
	st := h.call(request("d", 0, desc("k", "v"))).GetStatuses()[0]
	expect(t, "sliding log", st, over, 0, 29*time.Second)
}

func TestUnitMultiplier(t *testing.T) {
	h := newHarness(t, memStore(t), `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, unit_multiplier: 10, requests_per_unit: 2}
  - key: day
    rate_limit: {unit: day, requests_per_unit: 1}
`)
	h.clk.Set(epoch.Add(23 * time.Second)) // the window is [20 s, 30 s)
	st := h.call(request("d", 0, desc("k", "v"))).GetStatuses()[0]
	expect(t, "first", st, ok, 1, 7*time.Second)
	if m := st.GetCurrentLimit().GetUnitMultiplier(); m.GetValue() != 10 {
		t.Errorf("current_limit unit_multiplier %v; want 10", m)
	}
	h.call(request("d", 0, desc("k", "v")))
	expect(t, "third", h.call(request("d", 0, desc("k", "v"))).GetStatuses()[0], over, 0, 7*time.Second)
	h.clk.Set(epoch.Add(30 * time.Second))
	expect(t, "next window", h.call(request("d", 0, desc("k", "v"))).GetStatuses()[0], ok, 1, 10*time.Second)

	// A day is aligned to UTC midnight.
	h.clk.Set(epoch.Add(18 * time.Hour))
	h.call(request("d", 0, desc("day", "x")))
	expect(t, "day", h.call(request("d", 0, desc("day", "x"))).GetStatuses()[0], over, 0, 6*time.Hour)
}

func TestRateLimitsBurstAndSustained(t *testing.T) {
	h := newHarness(t, memStore(t), `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 3}
    rate_limits:
      - {unit: minute, requests_per_unit: 5, algorithm: sliding_log}
`)
	for i := range 3 {
		st := h.call(request("d", 0, desc("k", "v"))).GetStatuses()[0]
		// The least remaining: the burst's 2, 1, 0.
		expect(t, fmt.Sprintf("burst %d", i), st, ok, uint32(2-i), -1)
	}
	resp := h.call(request("d", 0, desc("k", "v")))
	st := resp.GetStatuses()[0]
	if resp.GetOverallCode() != over || st.GetCurrentLimit().GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND {
		t.Fatalf("the burst must refuse and be reported: %v", resp)
	}
	h.clk.Advance(time.Second)
	// 2 of the sustained 5 left: the minute limit reports, the refused
	// request took none.
	st = h.call(request("d", 0, desc("k", "v"))).GetStatuses()[0]
	expect(t, "sustained", st, ok, 1, -1)
	if st.GetCurrentLimit().GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE {
		t.Errorf("status reports %v; want the minute limit, the least remaining", st.GetCurrentLimit())
	}
	h.call(request("d", 0, desc("k", "v")))
	h.clk.Advance(time.Second)
	resp = h.call(request("d", 0, desc("k", "v")))
	st = resp.GetStatuses()[0]
	if resp.GetOverallCode() != over || st.GetCurrentLimit().GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE {
		t.Fatalf("the sustained limit must refuse: %v", resp)
	}
	// The first of the five slides out 60 s after it, 58 s from now.
	expect(t, "sustained refusal", st, over, 0, 58*time.Second)
}

// failing is a store whose every call fails, as an unreachable Redis.
type failing struct{}

var errDown = errors.New("connection refused")

func (failing) Take(context.Context, backend.Request) (backend.Result, error) {
	return backend.Result{}, errDown
}
func (failing) Peek(context.Context, backend.Request) (backend.Result, error) {
	return backend.Result{}, errDown
}
func (failing) Reset(context.Context, backend.Key, algorithms.Rule, time.Time) error { return errDown }
func (failing) TakeAll(context.Context, []backend.Request) (backend.Result, error) {
	return backend.Result{}, errDown
}

const failureYAML = `
domain: d
descriptors:
  - key: open
    rate_limit: {unit: minute, requests_per_unit: 2, on_failure: fail_open}
  - key: closed
    rate_limit: {unit: minute, requests_per_unit: 2, on_failure: fail_closed}
  - key: local
    rate_limit: {unit: minute, requests_per_unit: 2, on_failure: local}
  - key: default
    rate_limit: {unit: minute, requests_per_unit: 2}
`

func TestOnFailurePerLimit(t *testing.T) {
	fb, err := fallback.New(failing{})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, fb, failureYAML)
	codesOf := func(key string) []rlsv3.RateLimitResponse_Code {
		var out []rlsv3.RateLimitResponse_Code
		for range 3 {
			out = append(out, h.call(request("d", 0, desc(key, "v"))).GetOverallCode())
		}
		return out
	}
	want := map[string][]rlsv3.RateLimitResponse_Code{
		"open":    {ok, ok, ok},
		"closed":  {over, over, over},
		"local":   {ok, ok, over},
		"default": {ok, ok, over}, // the service's default, local
	}
	for key, w := range want {
		if got := codesOf(key); fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("%s: %v; want %v", key, got, w)
		}
	}
	// A request of an open and a closed limit is refused by the closed.
	if resp := h.call(request("d", 0, desc("open", "w"), desc("closed", "w"))); resp.GetOverallCode() != over {
		t.Errorf("open+closed: %v", resp)
	}

	// WithFailurePolicy changes the default.
	h2 := newHarness(t, fb, failureYAML, WithFailurePolicy(backend.FailClosed))
	if resp := h2.call(request("d", 0, desc("default", "z"))); resp.GetOverallCode() != over {
		t.Errorf("default fail_closed: %v", resp)
	}

	// The reference's answer: an error, for Envoy's failure_mode_deny.
	for _, store := range []backend.Store{fb, failing{}} {
		h3 := newHarness(t, store, failureYAML, WithErrorOnFailure(true))
		_, err := h3.svc.ShouldRateLimit(context.Background(), request("d", 0, desc("open", "v")))
		if status.Code(err) != codes.Unavailable {
			t.Errorf("%T with WithErrorOnFailure: %v; want Unavailable", store, err)
		}
	}

	// A store without a fallback around it: no error, each limit's
	// policy (a local policy admits: it needs package fallback).
	h4 := newHarness(t, failing{}, failureYAML)
	if resp := h4.call(request("d", 0, desc("closed", "v"))); resp.GetOverallCode() != over {
		t.Errorf("bare store, fail_closed: %v", resp)
	}
	if resp := h4.call(request("d", 0, desc("open", "v"), desc("default", "v"))); resp.GetOverallCode() != ok {
		t.Errorf("bare store, open and default: %v", resp)
	}
}

func TestHitsAddend(t *testing.T) {
	h := newHarness(t, memStore(t), `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10}
`)
	rem := func(req *rlsv3.RateLimitRequest) uint32 { return h.call(req).GetStatuses()[0].GetLimitRemaining() }
	if r := rem(request("d", 0, desc("k", "a"))); r != 9 {
		t.Errorf("request hits 0 counts 1: remaining %d; want 9", r)
	}
	if r := rem(request("d", 3, desc("k", "a"))); r != 6 {
		t.Errorf("request hits 3: remaining %d; want 6", r)
	}
	if r := rem(request("d", 5, withHits(desc("k", "a"), 2))); r != 4 {
		t.Errorf("descriptor hits 2 wins over the request's 5: remaining %d; want 4", r)
	}
	if r := rem(request("d", 0, withHits(desc("k", "a"), 0))); r != 4 {
		t.Errorf("descriptor hits 0 checks: remaining %d; want 4", r)
	}
	resp := h.call(request("d", 0, desc("k", "a"), desc("k", "a")))
	if resp.GetStatuses()[0].GetLimitRemaining() != 2 || resp.GetStatuses()[1].GetLimitRemaining() != 2 {
		t.Errorf("the same descriptor twice counts twice: %v", resp.GetStatuses())
	}
	// A cost above what is left refuses and consumes nothing.
	if resp := h.call(request("d", 3, desc("k", "a"))); resp.GetOverallCode() != over || resp.GetStatuses()[0].GetLimitRemaining() != 2 {
		t.Errorf("3 with 2 left: %v", resp)
	}
	// A cost above the limit can never pass.
	if resp := h.call(request("d", 11, desc("k", "b"))); resp.GetOverallCode() != over {
		t.Errorf("cost 11 on a limit of 10: %v", resp)
	}
	h.call(request("d", 2, desc("k", "a")))
	// A check of a key exactly at its limit passes with 0 left, as in
	// the reference: only a count over the limit refuses a check.
	if resp := h.call(request("d", 0, withHits(desc("k", "a"), 0))); resp.GetOverallCode() != ok || resp.GetStatuses()[0].GetLimitRemaining() != 0 {
		t.Errorf("check of a key at its limit: %v", resp)
	}
	// A key counted over its limit (the limit lowered under its count)
	// refuses a check, consuming nothing.
	h.svc.SetRules(mustRules(t, `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 9}
`))
	if resp := h.call(request("d", 0, withHits(desc("k", "a"), 0))); resp.GetOverallCode() != over {
		t.Errorf("check of a key over its limit: %v", resp)
	}
}

func TestCountsSurviveSetRules(t *testing.T) {
	h := newHarness(t, memStore(t), basicYAML)
	for range 5 {
		h.call(request("basic", 0, desc("key2", "r")))
	}
	h.svc.SetRules(mustRules(t, `
domain: basic
descriptors:
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 30}
`))
	expect(t, "after reload", h.call(request("basic", 0, desc("key2", "r"))).GetStatuses()[0], ok, 24, -1)
	h.svc.SetRules(nil)
	if _, err := h.svc.ShouldRateLimit(context.Background(), request("basic", 0, desc("key2", "r"))); status.Code(err) != codes.Unavailable {
		t.Errorf("no rules: %v; want Unavailable", err)
	}
}

func TestResponseHeaders(t *testing.T) {
	h := newHarness(t, memStore(t), basicYAML, WithResponseHeaders(HeaderNames{Reset: "X-Reset"}))
	h.clk.Advance(15 * time.Second)
	resp := h.call(request("basic", 0, desc("key1", "value1"), desc("key2", "h")))
	got := map[string]string{}
	for _, hv := range resp.GetResponseHeadersToAdd() {
		got[hv.GetKey()] = hv.GetValue()
	}
	want := map[string]string{"RateLimit-Limit": "20", "RateLimit-Remaining": "19", "X-Reset": "45"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("headers %v; want %v (the descriptor closest to its limit)", got, want)
	}
}

func TestStatsKeysAreBounded(t *testing.T) {
	h := newHarness(t, memStore(t), `
domain: d
descriptors:
  - key: user
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 1}
`, WithMaxStatKeys(2))
	for _, u := range []string{"a", "b", "c", "a"} {
		h.call(request("d", 0, desc("user", u), desc("ip", u)))
	}
	keys := map[string]bool{}
	for _, s := range h.takeStats() {
		keys[s.Key] = true
	}
	want := map[string]bool{"d.user_a": true, "d.user_b": true, "d.user": true, "d.ip": true}
	if fmt.Sprint(keys) != fmt.Sprint(want) {
		t.Errorf("stat keys %v; want %v (detailed keys up to 2, then the rule key)", keys, want)
	}
}

// A shadow limit is not consumed by a request the enforced limits refused.
func TestShadowNotConsumedByARefusedRequest(t *testing.T) {
	h := newHarness(t, memStore(t), `
domain: d
descriptors:
  - key: s
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: e
    rate_limit: {unit: minute, requests_per_unit: 1}
`)
	h.call(request("d", 0, desc("s", "v"), desc("e", "v")))
	resp := h.call(request("d", 0, desc("s", "v"), desc("e", "v")))
	if resp.GetOverallCode() != over {
		t.Fatalf("enforced limit did not refuse: %v", resp)
	}
	expect(t, "shadow", resp.GetStatuses()[0], ok, 9, -1)
}
