package rls

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/limitkit/limitkit/backend"
)

// The reference's service tests (test/service/ratelimit_test.go), its base
// limiter tests (test/limiter/base_limiter_test.go) and its Redis fixed
// window tests (test/redis/fixed_cache_impl_test.go), restated: where the
// reference mocks the cache's answer, the state it mocks is reached
// through real requests on the memory store.

const refServiceConfig = `
domain: different-domain
descriptors:
  - key: foo
    rate_limit: {unit: minute, requests_per_unit: 10, name: key_name}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: baz
    rate_limit: {unlimited: true}
  - key: regular
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: quota1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: quota2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 3}
`

// exhaust takes every unit of the descriptor's limit.
func (h *harness) exhaust(domain string, d *ratelimitv3.RateLimitDescriptor, n uint64) {
	h.t.Helper()
	h.call(request(domain, 0, withHits(d, n)))
	h.takeStats()
}

func codesOf(resp *rlsv3.RateLimitResponse) string {
	out := []string{resp.GetOverallCode().String()}
	for _, st := range resp.GetStatuses() {
		out = append(out, st.GetCode().String())
	}
	return strings.Join(out, " ")
}

func TestRef_Service_Service(t *testing.T) {
	h := newHarness(t, memStore(t), refServiceConfig)
	resp := h.call(request("test-domain", 1, desc("hello", "world")))
	if codesOf(resp) != "OK OK" || resp.GetStatuses()[0].GetCurrentLimit() != nil || resp.GetStatuses()[0].GetLimitRemaining() != 0 {
		t.Errorf("no limit: %v", resp)
	}
	h.exhaust("different-domain", desc("foo", "bar"), 10)
	resp = h.call(request("different-domain", 1, desc("foo", "bar"), desc("hello", "world")))
	st := resp.GetStatuses()
	if codesOf(resp) != "OVER_LIMIT OVER_LIMIT OK" || st[0].GetCurrentLimit().GetRequestsPerUnit() != 10 || st[0].GetCurrentLimit().GetName() != "key_name" ||
		st[0].GetLimitRemaining() != 0 || st[1].GetCurrentLimit() != nil {
		t.Errorf("over limit: %v", resp)
	}
	// A configuration that fails to load leaves the last good one; order
	// of descriptors does not matter.
	if _, err := NewRules(File{Name: "bad.yaml", Data: []byte("domain: different-domain\ndescriptors: [{key: foo, rate_limit: {unit: fortnight}}]\n")}); err == nil {
		t.Fatal("a bad configuration loaded")
	}
	resp = h.call(request("different-domain", 1, desc("hello", "world"), desc("foo", "bar")))
	if codesOf(resp) != "OVER_LIMIT OK OVER_LIMIT" {
		t.Errorf("after a refused load: %v", resp)
	}
}

func TestRef_Service_GlobalShadowMode(t *testing.T) {
	h := newHarness(t, memStore(t), refServiceConfig, WithShadowMode(true))
	h.exhaust("different-domain", desc("foo", "bar"), 10)
	resp := h.call(request("different-domain", 1, desc("foo", "bar"), desc("hello", "world")))
	if codesOf(resp) != "OK OVER_LIMIT OK" {
		t.Errorf("global shadow mode: %v; want OK overall, the status still OVER_LIMIT", codesOf(resp))
	}
}

func TestRef_Service_RuleShadowMode(t *testing.T) {
	h := newHarness(t, memStore(t), refServiceConfig)
	h.exhaust("different-domain", desc("shadow", "a"), 10)
	h.exhaust("different-domain", desc("shadow", "b"), 10)
	resp := h.call(request("different-domain", 1, desc("shadow", "a"), desc("shadow", "b")))
	if codesOf(resp) != "OK OK OK" {
		t.Errorf("two shadow rules over their limits: %v", codesOf(resp))
	}
}

func TestRef_Service_MixedRuleShadowMode(t *testing.T) {
	h := newHarness(t, memStore(t), refServiceConfig)
	h.exhaust("different-domain", desc("shadow", "a"), 10)
	h.exhaust("different-domain", desc("foo", "a"), 10)
	resp := h.call(request("different-domain", 1, desc("shadow", "a"), desc("foo", "a")))
	if codesOf(resp) != "OVER_LIMIT OK OVER_LIMIT" {
		t.Errorf("shadow and enforced over their limits: %v", codesOf(resp))
	}
}

// TestRef_Service_RatelimitHeaders restates TestServiceWithCustomRatelimitHeaders
// and TestServiceWithDefaultRatelimitHeaders: at Unix time 2222 a minute
// limit resets in 58 s.
func TestRef_Service_RatelimitHeaders(t *testing.T) {
	for _, names := range []HeaderNames{{Limit: "A-Ratelimit-Limit", Remaining: "A-Ratelimit-Remaining", Reset: "A-Ratelimit-Reset"}, {}} {
		h := newHarness(t, memStore(t), refServiceConfig, WithResponseHeaders(names))
		h.clk.Set(time.Unix(2222, 0))
		h.exhaust("different-domain", desc("foo", "bar"), 10)
		resp := h.call(request("different-domain", 1, desc("foo", "bar"), desc("hello", "world")))
		want := "[RateLimit-Limit=10 RateLimit-Remaining=0 RateLimit-Reset=58]"
		if names.Limit != "" {
			want = "[A-Ratelimit-Limit=10 A-Ratelimit-Remaining=0 A-Ratelimit-Reset=58]"
		}
		var got []string
		for _, hv := range resp.GetResponseHeadersToAdd() {
			got = append(got, hv.GetKey()+"="+hv.GetValue())
		}
		if fmt.Sprint(got) != want || resp.GetOverallCode() != over {
			t.Errorf("headers %v; want %s", got, want)
		}
	}
}

func TestRef_Service_EmptyDomainAndDescriptors(t *testing.T) {
	h := newHarness(t, memStore(t), refServiceConfig)
	_, err := h.svc.ShouldRateLimit(context.Background(), request("", 1, desc("hello", "world")))
	if status.Convert(err).Message() != "rate limit domain must not be empty" {
		t.Errorf("TestEmptyDomain: %v", err)
	}
	_, err = h.svc.ShouldRateLimit(context.Background(), request("test-domain", 1))
	if status.Convert(err).Message() != "rate limit descriptor list must not be empty" {
		t.Errorf("TestEmptyDescriptors: %v", err)
	}
}

// TestRef_Service_CacheError: the reference answers a Redis failure with
// an error; limitkit with WithErrorOnFailure (LIMITKIT_REFERENCE_ERRORS)
// too, and by default by the limit's failure policy (a difference).
func TestRef_Service_CacheError(t *testing.T) {
	h := newHarness(t, failing{}, refServiceConfig, WithErrorOnFailure(true))
	if _, err := h.svc.ShouldRateLimit(context.Background(), request("different-domain", 1, desc("foo", "bar"))); status.Code(err) != codes.Unavailable {
		t.Errorf("store down, reference errors: %v; want Unavailable", err)
	}
	h = newHarness(t, failing{}, refServiceConfig)
	if resp := h.call(request("different-domain", 1, desc("foo", "bar"))); resp.GetOverallCode() != ok {
		t.Errorf("store down, default policy: %v; want OK (fail open on a bare store)", resp)
	}
}

func TestRef_Service_InitialLoadError(t *testing.T) {
	svc, err := New(memStore(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = svc.ShouldRateLimit(context.Background(), request("test-domain", 1, desc("hello", "world")))
	if status.Convert(err).Message() != "no rate limit configuration loaded" {
		t.Errorf("no configuration: %v", err)
	}
}

func TestRef_Service_Unlimited(t *testing.T) {
	h := newHarness(t, memStore(t), refServiceConfig)
	resp := h.call(request("different-domain", 1, desc("foo", "bar"), desc("hello", "world"), desc("baz", "qux")))
	st := resp.GetStatuses()
	if codesOf(resp) != "OK OK OK OK" || st[0].GetLimitRemaining() != 9 || st[1].GetCurrentLimit() != nil || st[1].GetLimitRemaining() != 0 ||
		st[2].GetLimitRemaining() != math.MaxUint32 || st[2].GetCurrentLimit() != nil {
		t.Errorf("unlimited: %v", resp)
	}
}

// quotaCase is one of the reference's quota mode tests: which
// descriptors are over their limits before the request, and the codes.
type quotaCase struct {
	test  string
	opts  []Option
	descs [2]string // keys
	over  [2]bool
	want  string
}

func TestRef_Service_QuotaMode(t *testing.T) {
	limits := map[string]uint64{"regular": 5, "quota": 3, "quota1": 5, "quota2": 3, "foo": 10}
	cases := []quotaCase{
		{test: "TestServiceGlobalQuotaMode", opts: []Option{WithQuotaMode(true)}, descs: [2]string{"foo", "regular"}, over: [2]bool{true, true}, want: "OVER_LIMIT OVER_LIMIT OVER_LIMIT"},
		{test: "TestServiceGlobalQuotaMode, one under", opts: []Option{WithQuotaMode(true)}, descs: [2]string{"foo", "regular"}, over: [2]bool{true, false}, want: "OK OVER_LIMIT OK"},
		{test: "TestServicePerDescriptorQuotaMode", descs: [2]string{"regular", "quota"}, over: [2]bool{true, false}, want: "OVER_LIMIT OVER_LIMIT OK"},
		{test: "TestServiceMixedPerDescriptorModes", descs: [2]string{"regular", "quota"}, over: [2]bool{false, true}, want: "OVER_LIMIT OK OVER_LIMIT"},
		{test: "TestServiceMixedPerDescriptorModesUnderLimit", descs: [2]string{"regular", "quota"}, over: [2]bool{false, false}, want: "OK OK OK"},
		{test: "TestServiceQuotaModeOnlyAllOverTheLimit", descs: [2]string{"quota1", "quota2"}, over: [2]bool{true, true}, want: "OVER_LIMIT OVER_LIMIT OVER_LIMIT"},
		{test: "TestServiceQuotaModeOnlySomeOverTheLimit", descs: [2]string{"quota1", "quota2"}, over: [2]bool{true, false}, want: "OK OVER_LIMIT OK"},
		{test: "TestServiceQuotaModeWithShadowMode", opts: []Option{WithShadowMode(true), WithQuotaMode(true)}, descs: [2]string{"regular", "quota"}, over: [2]bool{true, true}, want: "OK OVER_LIMIT OVER_LIMIT"},
		{test: "TestServiceMixedModeWithShadowMode", opts: []Option{WithShadowMode(true)}, descs: [2]string{"regular", "quota"}, over: [2]bool{true, true}, want: "OK OVER_LIMIT OVER_LIMIT"},
	}
	for _, c := range cases {
		t.Run(c.test, func(t *testing.T) {
			h := newHarness(t, memStore(t), refServiceConfig, c.opts...)
			for i, k := range c.descs {
				if c.over[i] {
					h.exhaust("different-domain", desc(k, "limit"), limits[k])
				}
			}
			resp := h.call(request("different-domain", 1, desc(c.descs[0], "limit"), desc(c.descs[1], "limit")))
			if got := codesOf(resp); got != c.want {
				t.Errorf("%s: %s; want %s", c.test, got, c.want)
			}
			// What passes is consumed, what refused is not.
			if c.want[:2] == "OK" {
				for i, k := range c.descs {
					want := limits[k] - 1
					if c.over[i] {
						want = 0
					}
					if c.opts != nil && strings.Contains(c.test, "Shadow") {
						continue
					}
					if st := h.call(request("different-domain", 0, withHits(desc(k, "limit"), 0))).GetStatuses()[0]; uint64(st.GetLimitRemaining()) != want {
						t.Errorf("%s: %s has %d left; want %d", c.test, k, st.GetLimitRemaining(), want)
					}
				}
			}
		})
	}
}

// refNearYAML holds the limits of the reference's base limiter and fixed
// window tests.
const refNearYAML = `
domain: domain
descriptors:
  - key: key
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: key3
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: key4
    rate_limit: {unit: hour, requests_per_unit: 15}
  - key: key5
    rate_limit: {unit: second, requests_per_unit: 20}
  - key: key6
    rate_limit: {unit: second, requests_per_unit: 8}
  - key: five
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: fiveshadow
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: tenshadow
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: key10
    rate_limit: {unit: second, requests_per_unit: 30}
`

// counted is one decision's hits per counter, as the reference's stats.
type counted struct{ total, over, near, within, shadow uint64 }

// hit sends hits on key=value (after preset units taken first) and
// returns the status and what the Stat counted.
func (h *harness) hit(key, value string, preset, hits uint64) (*rlsv3.RateLimitResponse_DescriptorStatus, counted) {
	h.t.Helper()
	if preset > 0 {
		h.exhaust("domain", desc(key, value), preset)
	}
	h.takeStats()
	st := h.call(request("domain", 0, withHits(desc(key, value), hits))).GetStatuses()[0]
	s := h.takeStats()
	if len(s) != 1 {
		h.t.Fatalf("%s: %d stats", key, len(s))
	}
	return st, counted{s[0].Hits, s[0].OverLimit, s[0].NearLimit, s[0].WithinLimit, s[0].ShadowMode}
}

func expectCounted(t *testing.T, what string, st *rlsv3.RateLimitResponse_DescriptorStatus, code rlsv3.RateLimitResponse_Code, remaining uint32, got, want counted) {
	t.Helper()
	if st.GetCode() != code || st.GetLimitRemaining() != remaining || got != want {
		t.Errorf("%s: %v remaining %d counted %+v; want %v remaining %d counted %+v", what, st.GetCode(), st.GetLimitRemaining(), got, code, remaining, want)
	}
}

func TestRef_BaseLimiter_GetResponseStatus(t *testing.T) {
	h := newHarness(t, memStore(t), refNearYAML)
	// TestGetResponseStatusOverLimit: limit 5, 2 counted, 5 more: 2 over
	// the limit, 1 in the near band (4 to 5).
	st, c := h.hit("five", "a", 2, 5)
	expectCounted(t, "TestGetResponseStatusOverLimit", st, over, 3, c, counted{total: 5, over: 2, near: 1})
	// TestGetResponseStatusOverLimitShadowMode: the same in shadow mode
	// answers OK and counts shadow_mode.
	st, c = h.hit("fiveshadow", "a", 2, 5)
	expectCounted(t, "TestGetResponseStatusOverLimitShadowMode", st, ok, 3, c, counted{total: 5, over: 2, near: 1, shadow: 2})
	// TestGetResponseStatusBelowLimit: limit 10, 2 counted, 4 more: 4
	// left, none near (threshold 8).
	st, c = h.hit("key", "a", 2, 4)
	expectCounted(t, "TestGetResponseStatusBelowLimit", st, ok, 4, c, counted{total: 4, within: 4})
	st, c = h.hit("tenshadow", "a", 2, 4)
	expectCounted(t, "TestGetResponseStatusBelowLimitShadowMode", st, ok, 4, c, counted{total: 4, within: 4})
	// TestGetResponseStatusEmptyKey: no limit, OK with nothing.
	if st := h.call(request("domain", 0, desc("nolimit", "x"))).GetStatuses()[0]; st.GetCode() != ok || st.GetLimitRemaining() != 0 || st.GetCurrentLimit() != nil {
		t.Errorf("TestGetResponseStatusEmptyKey: %v", st)
	}
}

func TestRef_FixedCache_NearLimit(t *testing.T) {
	h := newHarness(t, memStore(t), refNearYAML)
	// key4, 15 per hour (near from 12): 10 counted, then 1: within.
	st, c := h.hit("key4", "value4", 10, 1)
	expectCounted(t, "11 of 15", st, ok, 4, c, counted{total: 1, within: 1})
	// 12 counted, then 1: 13 is near.
	st, c = h.hit("key4", "value4", 1, 1)
	expectCounted(t, "13 of 15", st, ok, 2, c, counted{total: 1, within: 1, near: 1})
	// 15 counted, then 1: over.
	st, c = h.hit("key4", "value4", 2, 1)
	expectCounted(t, "16 of 15", st, over, 0, c, counted{total: 1, over: 1})
	// key5, 20 per second: 3 hits from 2: within, none near.
	st, c = h.hit("key5", "value5", 2, 3)
	expectCounted(t, "key5", st, ok, 15, c, counted{total: 3, within: 3})
	// key6, 8 per second (near from 6): 2 hits from 5: one near.
	st, c = h.hit("key6", "value6", 5, 2)
	expectCounted(t, "key6", st, ok, 1, c, counted{total: 2, within: 2, near: 1})
	// key7: 3 hits from 16 of 20: all near.
	st, c = h.hit("key5", "value7", 16, 3)
	expectCounted(t, "key7", st, ok, 1, c, counted{total: 3, within: 3, near: 3})
	// key8: 3 hits from 19 of 20: 2 over, 1 near.
	st, c = h.hit("key5", "value8", 19, 3)
	expectCounted(t, "key8", st, over, 1, c, counted{total: 3, over: 2, near: 1})
	// key9: 7 hits from 15 of 20: 2 over, 4 near.
	st, c = h.hit("key5", "value9", 15, 7)
	expectCounted(t, "key9", st, over, 5, c, counted{total: 7, over: 2, near: 4})
	// key10: 3 hits on a key already over its limit (27 of a limit
	// lowered to 10): all 3 over.
	h.exhaust("domain", desc("key10", "value10"), 27)
	h.svc.SetRules(mustRules(t, strings.Replace(refNearYAML, "requests_per_unit: 30", "requests_per_unit: 10", 1)))
	st, c = h.hit("key10", "value10", 0, 3)
	expectCounted(t, "key10", st, over, 0, c, counted{total: 3, over: 3})
}

// TestRef_FixedCache_Redis restates TestRedis's check-only descriptor: a
// key counted over its limit refuses a check (hits 0), counting nothing.
func TestRef_FixedCache_Redis(t *testing.T) {
	h := newHarness(t, memStore(t), refNearYAML)
	st, c := h.hit("key", "value", 5, 1)
	expectCounted(t, "5 of 10, then 1", st, ok, 4, c, counted{total: 1, within: 1})
	h.exhaust("domain", desc("key3", "value3"), 10)
	st, c = h.hit("key3", "value3", 0, 0)
	expectCounted(t, "check at the limit", st, ok, 0, c, counted{})
	h.svc.SetRules(mustRules(t, strings.Replace(refNearYAML, "unit: hour, requests_per_unit: 10", "unit: hour, requests_per_unit: 9", 1)))
	st, c = h.hit("key3", "value3", 0, 0)
	expectCounted(t, "check over the limit", st, over, 0, c, counted{})
}

// TestRef_Service_CheckOnlyAtTheLimit: hits_addend 0 on a key exactly at
// its limit is OK (the reference compares count > limit).
func TestRef_Service_CheckOnlyAtTheLimit(t *testing.T) {
	for _, alg := range []string{"fixed_window", "sliding_log", "sliding_counter", "compact_log", "two_level", "gcra"} {
		h := newHarness(t, memStore(t), "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: "+alg+"}\n")
		h.exhaust("d", desc("k", "v"), 3)
		resp := h.call(request("d", 0, withHits(desc("k", "v"), 0)))
		if resp.GetOverallCode() != ok || resp.GetStatuses()[0].GetLimitRemaining() != 0 {
			t.Errorf("%s: check at the limit: %v", alg, resp)
		}
		// A request that takes a unit is refused.
		if resp := h.call(request("d", 0, desc("k", "v"))); resp.GetOverallCode() != over {
			t.Errorf("%s: a hit at the limit: %v", alg, resp)
		}
	}
}

// shortRefusals refuses every request while saying 5 units are left, as
// a store whose algorithm counts otherwise than the hits might.
type shortRefusals struct{ backend.Store }

func (shortRefusals) TakeAll(_ context.Context, reqs []backend.Request) (backend.Result, error) {
	return backend.Result{Limit: reqs[0].Rule.Limit, Remaining: 5, RetryAfter: time.Second, ResetAfter: time.Second}, nil
}

// TestRefusalShortOfTheLimitCounts: a refusal that leaves room under the
// limit counts its hits as over_limit, never an underflow.
func TestRefusalShortOfTheLimitCounts(t *testing.T) {
	h := newHarness(t, shortRefusals{memStore(t)}, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 10}\n  - key: j\n    rate_limit: {unit: minute, requests_per_unit: 10}\n")
	h.takeStats()
	resp := h.call(request("d", 0, withHits(desc("k", "v"), 2), desc("j", "v")))
	s := h.takeStats()
	if resp.GetOverallCode() != over || len(s) != 2 || s[0].OverLimit != 2 || s[0].NearLimit != 0 {
		t.Fatalf("a refusal 5 short of the limit: %v %+v; want 2 hits over_limit", resp, s)
	}
}
